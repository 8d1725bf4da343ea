"""Every command and distribution says the one version (VERSION), and /metrics carries the
standard process and Python series."""

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from themis_shard.metrics import ShardMetrics

ROOT = Path(__file__).resolve().parents[1]
VERSION = (ROOT / "VERSION").read_text().strip()


@pytest.mark.parametrize(
    ("main", "prog"),
    [
        ("themis_shard.local_cluster", "themis"),
        ("themis_shard.__main__", "themis-shard"),
        ("themis_operator.__main__", "themis-operator"),
    ],
)
def test_each_command_prints_the_one_version(main, prog):
    code = f"from {main} import main; main(['--version'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{prog} {VERSION}"


@pytest.mark.parametrize("folder", ["core", ".", "operator", "client", "testing"])
def test_every_pyproject_reads_its_version_from_the_one_version_file(folder):
    """setuptools itself expands the dynamic version, as a build would."""
    from setuptools.config.pyprojecttoml import read_configuration

    config = read_configuration(ROOT / folder / "pyproject.toml", expand=True)
    assert config["project"]["version"].strip() == VERSION  # the build strips the newline
    assert (ROOT / folder / "VERSION").resolve() == (ROOT / "VERSION").resolve()


@pytest.mark.parametrize(
    "dist", ["themisdb-core", "themisdb", "themisdb-operator", "themisdb-client", "themisdb-testing"]
)
def test_installed_distributions_carry_the_one_version(dist):
    try:
        installed = version(dist)
    except PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here (make install installs it)")
    assert installed == VERSION


def test_the_packages_say_the_one_version():
    import themis_client
    import themis_core
    import themis_shard

    assert themis_core.__version__ == themis_shard.__version__ == themis_client.__version__ == VERSION


@pytest.mark.parametrize("dockerfile", ["Dockerfile.shard", "Dockerfile.operator"])
def test_image_labels_default_to_the_one_version(dockerfile):
    """images/build.sh passes VERSION; a plain `docker build` gets the same by default."""
    assert f"ARG VERSION={VERSION}\n" in (ROOT / dockerfile).read_text()


def _series(metrics: ShardMetrics) -> set[str]:
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}


def test_the_shard_registry_exports_process_and_python_collectors():
    names = _series(ShardMetrics("shard-0"))
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= names
    assert {"python_info", "python_gc_collections_total"} <= names


def test_collectors_live_on_each_shards_registry_not_the_global_one():
    """Two shards in one process (the tests do this) must not clash on duplicate series."""
    assert _series(ShardMetrics("a")) == _series(ShardMetrics("b"))
