#!/usr/bin/env bash
# 16 x 50 us from one thread at 99: default runs (200 ms period) vs 5 s runs; tracker summaries.
set -u
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DVGPU_BUILD_TESTS=OFF >/tmp/build.log 2>&1 && cmake --build /tmp/b >>/tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }
nvcc -O2 -arch=sm_90 -o /tmp/conc bench/compute/concurrency.cu || exit 1
LIB=/tmp/b/libvgpu.so
ARGS="run --streams 16 --kernel-us 50 --warmup 1 --seconds 4"
rate() { sed -n 's/.*"rate": \([0-9.]*\).*/\1/p'; }
for round in 1 2; do
  echo "$round native $(/tmp/conc $ARGS 2>/dev/null | rate)"
  for cfg in "P99 default" "P99 5s" "P60 default"; do
    set -- $cfg; lim=${1#P}; per=$2
    rm -f /tmp/ledger
    extra=""; [ $per = 5s ] && extra="VGPU_COMPUTE_PERIOD=5s"
    r=$(env LD_PRELOAD=$LIB CUDA_DEVICE_SM_LIMIT=$lim CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/ledger $extra LIBCUDA_LOG_LEVEL=4 /tmp/conc $ARGS 2>/tmp/sum.txt | rate)
    echo "$round $lim $per $r :: $(grep -o '[0-9]* launches.*' /tmp/sum.txt | tail -1)"
  done
done
