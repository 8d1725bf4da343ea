"""Build llama.cpp's own C++ `llama-server` (bench/engine.py's peer) once per CPU, and print its path.

The sources are the llama.cpp that llama-cpp-python 0.3.36 vendors — the very commit our engine
runs — so the comparison measures the serving stacks, not two llama.cpp versions. It is built
with the same native, AMX-free flags as the engine's wheel (tools/llama_wheel.py), statically,
into ~/.cache/themis/tools/ (≈15 min on 2 cores the first time). Bench-only: nothing on
`make install`'s or `make test`'s path calls it.

Usage: .venv/bin/python bench/llama_server_build.py   (the binary's path on the last line)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def build(target: Path, tool) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "cmake", "ninja"], check=True)
        cmake = str(Path(sys.executable).parent / "cmake")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={tool.VERSION}", "-d", tmp],
            check=True,
        )  # fmt: skip
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = next(Path(tmp).glob("llama_cpp_python-*/vendor/llama.cpp"))
        out = Path(tmp) / "build"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run([cmake, "-S", str(src), "-B", str(out), *gen, *cmake_flags(tool)], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run([cmake, "--build", str(out), "--target", "llama-server", "-j", jobs], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / "bin" / "llama-server", target)


def main() -> int:
    tool = wheel_tool()
    key = tool.cpu_key(Path("/proc/cpuinfo").read_text(), " ".join(cmake_flags(tool)))
    cache = Path(os.environ.get("THEMIS_TOOL_CACHE", Path.home() / ".cache" / "themis" / "tools"))
    target = cache / f"llama-server-{tool.VERSION}-{key}" / "llama-server"
    if not target.exists():
        print(f"building llama-server (llama.cpp of llama-cpp-python {tool.VERSION}) into {target}",
              file=sys.stderr)  # fmt: skip
        build(target, tool)
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
