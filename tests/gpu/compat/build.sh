#!/usr/bin/env bash
# Builds the real-GPU test programs of tests/gpu with one CUDA toolkit: static runtime,
# -arch=sm_90, so that tests/gpu/run.sh --only compat can run them under that runtime.
#
# Usage: tests/gpu/compat/build.sh TOOLCHAIN OUTDIR
#   TOOLCHAIN  a tree unpacked by tests/gpu/compat/toolchains.sh (FOLDER/cuda-11.8, FOLDER/cuda-12.4:
#              its vgpu-toolchain.env names nvcc and the host compiler), or an installed toolkit
#              with bin/nvcc (e.g. /usr/local/cuda, as on the GPU machine)
#   OUTDIR     receives the programs and BUILD_INFO (toolkit, CUDART_VERSION, host compiler, date)
#
# Programs (sources in the repository, nothing generated):
#   paths_check        tests/gpu/memory/paths_check.cu: every allocation path (driver and runtime
#                      API, pools, VMM, arrays, graphs incl. cudaGraphAddMemAllocNode), pinned memory
#   runtime_api_check  tests/gpu/runtime_api_check.cu: kernels, cudaMallocAsync, pitch, managed,
#                      a captured graph; prints checksums
#   driver_api_check   tests/gpu/driver_api_check.cc, compiled against this toolkit's cuda.h (its
#                      versioned names: cuMemAlloc -> cuMemAlloc_v2, ...) and linked to libcuda.so.1
#   query_check        tests/gpu/compat/query_check.cu: memory queries, runtime and driver
#   spin               bench/compute/spin.cu: fixed-length kernels for the compute limit
# All link the CUDA runtime statically (its requests of cuGetProcAddress are the runtime's own),
# need glibc 2.34 or newer (libdl and libpthread merged) and depend on libcuda.so.1 only where the
# program calls the driver API itself.
set -euo pipefail

usage() { echo "usage: tests/gpu/compat/build.sh TOOLCHAIN OUTDIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
TOOLCHAIN=$(cd "$1" 2>/dev/null && pwd) || { echo "build.sh: toolchain folder $1 not found" >&2; exit 2; }
OUTDIR=$2

CCBIN=""
if [ -f "$TOOLCHAIN/vgpu-toolchain.env" ]; then
  # shellcheck source=/dev/null
  . "$TOOLCHAIN/vgpu-toolchain.env"
  INCLUDE="$TOOLCHAIN/usr/include"
  STUBS="$TOOLCHAIN/usr/lib/x86_64-linux-gnu/stubs"
elif [ -x "$TOOLCHAIN/bin/nvcc" ]; then
  NVCC="$TOOLCHAIN/bin/nvcc"
  INCLUDE="$TOOLCHAIN/include"
  STUBS="$TOOLCHAIN/lib64/stubs"
  CUDA_RELEASE=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
else
  echo "build.sh: $TOOLCHAIN is neither a tree from toolchains.sh (vgpu-toolchain.env) nor a toolkit with bin/nvcc" >&2
  exit 2
fi
[ -f "$STUBS/libcuda.so" ] || { echo "build.sh: $STUBS/libcuda.so (the driver's link stub) not found" >&2; exit 1; }
HOST_CXX=${CCBIN:-g++}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

# The C++ runtime is linked statically too: the GPU machine's libstdc++ may be older than the host
# compiler's.
NVCC_FLAGS=(-O2 -std=c++17 -arch=sm_90 -cudart static -Xcompiler -static-libstdc++,-static-libgcc)
[ -n "$CCBIN" ] && NVCC_FLAGS+=(-ccbin "$CCBIN")
build_cu() {  # build_cu <name> <source> [extra flags...]
  local name=$1 src=$2
  shift 2
  echo "build.sh: $CUDA_RELEASE: $name"
  "$NVCC" "${NVCC_FLAGS[@]}" -o "$OUTDIR/$name" "$src" "$@"
}
build_cu paths_check "$ROOT/tests/gpu/memory/paths_check.cu" -L"$STUBS" -lcuda
build_cu runtime_api_check "$ROOT/tests/gpu/runtime_api_check.cu"
build_cu query_check "$ROOT/tests/gpu/compat/query_check.cu" -L"$STUBS" -lcuda
build_cu spin "$ROOT/bench/compute/spin.cu"
echo "build.sh: $CUDA_RELEASE: driver_api_check"
"$HOST_CXX" -std=c++17 -O2 -static-libstdc++ -static-libgcc -I"$INCLUDE" -o "$OUTDIR/driver_api_check" "$ROOT/tests/gpu/driver_api_check.cc" \
  -L"$STUBS" -lcuda

# The runtime each program was built with, from the program itself (query_check prints it only on
# a GPU, so ask the preprocessor of this toolkit).
cudart=$(printf '#include <cuda_runtime_api.h>\nCUDART_VERSION\n' | "$HOST_CXX" -E -P -I"$INCLUDE" -x c++ - | tail -1)
{
  echo "cuda_release=$CUDA_RELEASE"
  echo "cudart_version=$cudart"
  echo "nvcc=$("$NVCC" --version | tail -1)"
  echo "host_compiler=$("$HOST_CXX" --version | head -1)"
  echo "built=$(date -u +%FT%TZ) on $(uname -n)"
  echo "source=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
} >"$OUTDIR/BUILD_INFO"
echo "build.sh: $OUTDIR ($(du -sh "$OUTDIR" | cut -f1)): $(tr '\n' ' ' <"$OUTDIR/BUILD_INFO")"
