"""The CUDA shard image builds on a machine without a GPU (THEMIS_BUILD_CUDA_IMAGE=1; not in `make test`).

Two tests, both long and both off unless asked for:

* NVIDIA's PyPI wheels make a CUDA toolkit (images/cuda_toolkit.sh, CUDA_TOOLKIT=pypi): its nvcc
  compiles a kernel for every architecture the Dockerfile names and links it against the wheels'
  cudart; the program runs here and reports that there is no driver (≈1 min, ~900 MB of wheels
  from the pip cache or PyPI).
* `images/build.sh shard-cuda` builds the whole image with buildah, and in it llama.cpp's CUDA
  backend resolves all its libraries (but the driver's), llama_cpp, faiss and cupy import, and
  `themis-shard --version` runs (hours on 2 cores: llama.cpp's CUDA kernels for four
  architectures).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("THEMIS_BUILD_CUDA_IMAGE") != "1", reason="long: set THEMIS_BUILD_CUDA_IMAGE=1"
)

KERNEL = r"""
#include <cstdio>
#include <cuda_runtime.h>
__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  printf("cudart %d: %s (%d devices)\n", CUDART_VERSION, cudaGetErrorString(err), count);
  return 0;
}
"""


def dockerfile_architectures() -> list[str]:
    text = (ROOT / "Dockerfile.shard").read_text()
    return re.search(r'ARG CUDA_ARCHITECTURES="([0-9;]+)"', text).group(1).split(";")


def test_the_pypi_toolkit_compiles_a_kernel_for_every_image_architecture(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    done = subprocess.run(
        ["bash", str(ROOT / "images" / "cuda_toolkit.sh")],
        env={**os.environ, "PYTHON": str(python), "CUDA_TOOLKIT": "pypi"},
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    root = Path(done.stdout.strip().splitlines()[-1])
    assert (root / "bin" / "nvcc").exists() and (root / "lib" / "libcudart.so").exists()
    (tmp_path / "k.cu").write_text(KERNEL)
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in dockerfile_architectures()]
    subprocess.run(
        [str(root / "bin" / "nvcc"), *gencode, str(tmp_path / "k.cu"), "-o", str(tmp_path / "k"),
         f"-L{root / 'lib'}", "-lcudart", f"-Xlinker=-rpath={root / 'lib'}"],
        check=True,
    )  # fmt: skip
    ran = subprocess.run([str(tmp_path / "k")], capture_output=True, text=True, check=True)
    assert ran.stdout.startswith("cudart 13")


def test_the_cuda_shard_image_builds_and_its_cuda_backend_links(tmp_path: Path) -> None:
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (make images installs it)")
    image = os.environ.get("THEMIS_SHARD_CUDA_IMAGE", "localhost/themis-shard:cuda")
    subprocess.run(["bash", str(ROOT / "images" / "build.sh"), "shard-cuda"], check=True, cwd=ROOT)
    buildah = ["buildah", "--storage-driver", os.environ.get("THEMIS_BUILDAH_STORAGE_DRIVER", "vfs")]
    ctr = subprocess.run(
        [*buildah, "from", image], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    try:

        def run(*cmd: str) -> str:
            argv = [*buildah, "run", "--isolation", "chroot", ctr, "--", *cmd]
            return subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True).stdout

        lib = "/opt/themis/lib/python3.12/site-packages/llama_cpp/lib/libggml-cuda.so"
        missing = [line for line in run("ldd", lib).splitlines() if "not found" in line]
        assert all("libcuda.so" in line for line in missing), missing
        run("python", "-c", "import llama_cpp, faiss, cupy; llama_cpp.llama_backend_init()")
        assert run("themis-shard", "--version").strip()
    finally:
        subprocess.run([*buildah, "rm", ctr], check=False)
