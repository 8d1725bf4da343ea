#!/usr/bin/env bash
# A CUDA toolkit to compile llama.cpp with, printed as its root directory (last line of output):
# the build image's own (/usr/local/cuda, e.g. nvidia/cuda:*-devel) when it has nvcc, else NVIDIA's
# PyPI wheels installed into the Python environment of $PYTHON (default: python).
#
#   CUDA_ROOT=$(images/cuda_toolkit.sh | tail -n 1)      (CUDA_TOOLKIT=pypi: never the image's)
#
# The PyPI toolkit: the CUDA 13 wheels are the first whose nvcc is a whole compiler (the -cu12
# nvcc wheels carry ptxas only). They unpack into one tree, site-packages/nvidia/cu13/{bin,include,
# lib}; CMake's FindCUDAToolkit looks for unversioned libraries (libcudart.so) and nvcc.profile
# in lib64, neither of which the wheels ship, so they are linked here. cudart and cuBLAS stay in the environment: libggml-cuda
# loads them at run time. The wheels carry no driver stub (libcuda.so): the caller builds without
# llama.cpp's VMM pool, which is what needs it (GGML_CUDA_NO_VMM=ON).
# No driver or GPU is needed to compile.
set -euo pipefail
PYTHON=${PYTHON:-python}
CUDA_WHEELS=${CUDA_WHEELS:-"nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14"}

if [ "${CUDA_TOOLKIT:-auto}" != pypi ] && [ -x /usr/local/cuda/bin/nvcc ]; then
    echo /usr/local/cuda
    exit 0
fi
# shellcheck disable=SC2086
"$PYTHON" -m pip install --quiet $CUDA_WHEELS
root=$("$PYTHON" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
for lib in cudart cublas cublasLt; do
    so=$(cd "$root/lib" && ls "lib$lib.so."* | head -n 1)
    ln -sf "$so" "$root/lib/lib$lib.so"
done
ln -sfn lib "$root/lib64"  # nvcc.profile links from lib64
"$root/bin/nvcc" --version | tail -n 1 >&2
echo "$root"
