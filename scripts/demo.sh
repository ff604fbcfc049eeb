#!/usr/bin/env bash
# The main job: runs the bundled example under `vgpu run` with a 1 GiB memory limit and a 30%
# compute limit. On a machine without an NVIDIA driver it runs on the simulated driver (the
# test double in build/sim) and says so first.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ -z "${VGPU_DEMO_SIMULATE:-}" ]; then
  echo "demo: NVIDIA driver found; running on the real GPU"
else
  echo "demo: NO NVIDIA DRIVER on this machine - running on vgpu's SIMULATED driver ($BUILD/sim),"
  echo "      a test double used by CI. It is not a GPU and is never deployed."
  export LD_LIBRARY_PATH="$PWD/$BUILD/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export VGPU_SIM_MEMORY=${VGPU_SIM_MEMORY:-8GiB}
fi
set -x
"$BUILD/vgpu" run --memory 1GiB --compute 30 -- "$BUILD/vgpu-example"
