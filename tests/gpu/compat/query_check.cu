// Real-GPU check of the memory queries under a limit, built with each CUDA runtime
// (tests/gpu/compat/build.sh): the runtime's own queries (cudaMemGetInfo,
// cudaGetDeviceProperties' totalGlobalMem, reached through cuGetProcAddress) and the driver's
// exported ones as that toolkit's cuda.h names them (cuMemGetInfo, cuDeviceTotalMem).
//
//   query_check --limit-mib N
//       prints one line:
//         result runtime=<CUDART_VERSION> driver=<cudaDriverGetVersion> rt_total=<bytes>
//         rt_free=<bytes> props_total=<bytes> cu_total=<bytes> cu_free=<bytes>
//         device_total=<bytes> limit_bytes=<bytes> verdict=PASS|FAIL
//       PASS: all four totals equal the limit and both free figures are at most it.
// Every CUDA call's result is checked; setup failures exit 1.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../cuda_check.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--limit-mib") != 0) {
    std::fprintf(stderr, "usage: query_check --limit-mib N\n");
    return 2;
  }
  const unsigned long long limit = std::strtoull(argv[2], nullptr, 10) << 20;
  int driver = 0;
  RT(cudaDriverGetVersion(&driver));
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));  // the runtime's primary context, current from here on
  size_t rt_free = 0, rt_total = 0;
  RT(cudaMemGetInfo(&rt_free, &rt_total));
  cudaDeviceProp prop{};
  RT(cudaGetDeviceProperties(&prop, 0));
  size_t cu_free = 0, cu_total = 0;
  DRV(cuMemGetInfo(&cu_free, &cu_total));
  CUdevice dev = 0;
  DRV(cuCtxGetDevice(&dev));
  size_t device_total = 0;
  DRV(cuDeviceTotalMem(&device_total, dev));
  const bool pass = rt_total == limit && prop.totalGlobalMem == limit && cu_total == limit && device_total == limit &&
                    rt_free <= limit && cu_free <= limit;
  std::printf("result runtime=%d driver=%d rt_total=%zu rt_free=%zu props_total=%zu cu_total=%zu cu_free=%zu "
              "device_total=%zu limit_bytes=%llu verdict=%s\n",
              CUDART_VERSION, driver, rt_total, rt_free, prop.totalGlobalMem, cu_total, cu_free, device_total, limit,
              pass ? "PASS" : "FAIL");
  return 0;
}
