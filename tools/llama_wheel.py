"""Build (once per CPU) and print the wheel of llama-cpp-python that `make install` installs.

llama.cpp compiles with `-march=native`, so its wheel is only valid on the CPU it was built on.
pip's own wheel cache is keyed by the source archive alone and would hand an AVX-512 build to an
AVX2-only machine (SIGILL) or an AMX-enabled build to a VM that advertises AMX but traps it
(SIGSEGV in ggml_backend_amx_mul_mat). This script keys its wheelhouse by the CPU model, the CPU
flags and the compiler flags, and builds only when no wheel for that key exists.

AMX is compiled out (-mno-amx-*): on the machines measured here it either traps or is slower than
AVX-512 repacking for a 270M model, and weight repacking (extra buffer types) stays on; the shard
still probes the build at start-up (llm/cpu_probe.py) and falls back if it crashes anyway.

Usage: python tools/llama_wheel.py PYTHON   (prints the wheel's path on the last line)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.3.36"
NATIVE_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS = (
    "-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
    f"-DCMAKE_C_FLAGS='{NATIVE_FLAGS}' -DCMAKE_CXX_FLAGS='{NATIVE_FLAGS}'"
)


def cpu_key(cpuinfo: str, cmake_args: str) -> str:
    """A stable key for "a native build from here runs there": CPU model, flags and build flags."""
    model = flags = ""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name == "flags" and not flags:
            flags = " ".join(sorted(value.split()))
    digest = hashlib.sha256(f"{VERSION}\n{model}\n{flags}\n{cmake_args}".encode()).hexdigest()
    return digest[:16]


def wheelhouse(cache_root: Path, cpuinfo: str) -> Path:
    return cache_root / f"llama-cpp-python-{VERSION}-{cpu_key(cpuinfo, CMAKE_ARGS)}"


def build_once(house: Path, python: str) -> Path:
    """The wheel in ``house``, compiled by one process at a time: a second `make install` (another
    checkout, a CI run) waits on the lock instead of compiling the same wheel alongside, and a
    killed build leaves only its temporary folder behind, never a wheel that looks finished."""
    house.mkdir(parents=True, exist_ok=True)
    with (house.parent / f"{house.name}.lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another build of llama-cpp-python into {house}", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = sorted(house.glob("llama_cpp_python-*.whl"))
        if wheels:
            return wheels[-1]
        print(
            f"building llama-cpp-python {VERSION} for this CPU (~15 min on 2 cores) into {house}",
            file=sys.stderr,
        )
        with tempfile.TemporaryDirectory(dir=house.parent, prefix=f".{house.name}-") as tmp:
            subprocess.run(
                [
                    python,
                    "-m",
                    "pip",
                    "wheel",
                    "--quiet",
                    "--no-deps",
                    "--no-cache-dir",
                    "--no-binary",
                    "llama-cpp-python",
                    "-w",
                    tmp,
                    f"llama-cpp-python=={VERSION}",
                ],
                env={**os.environ, "CMAKE_ARGS": CMAKE_ARGS},
                check=True,
            )
            (built,) = Path(tmp).glob("llama_cpp_python-*.whl")
            os.replace(built, house / built.name)
        return house / built.name


def main(argv: list[str]) -> int:
    python = argv[1] if len(argv) > 1 else sys.executable
    cache_root = Path(os.environ.get("THEMIS_WHEEL_CACHE", Path.home() / ".cache" / "themis" / "wheels"))
    house = wheelhouse(cache_root, Path("/proc/cpuinfo").read_text())
    wheels = sorted(house.glob("llama_cpp_python-*.whl"))
    print(wheels[-1] if wheels else build_once(house, python))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
