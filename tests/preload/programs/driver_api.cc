// A driver-API program linked against libcuda.so.1 (layer 1: exported symbols).
// Prints a deterministic transcript on stdout; the harness compares it with and without vgpu.
#include <cuda.h>

#include <cstdint>
#include <cstdio>

#include "check.h"

int main() {
  CHECK_CU(cuInit(0));
  int driver_version = 0;
  CHECK_CU(cuDriverGetVersion(&driver_version));
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  CHECK(count >= 1);
  std::printf("devices %d\n", count);
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  char name[128];
  CHECK_CU(cuDeviceGetName(name, sizeof(name), dev));
  size_t total = 0;
  CHECK_CU(cuDeviceTotalMem(&total, dev));
  std::printf("device 0 %s total %zu\n", name, total);

  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  size_t free_before = 0, total_info = 0;
  CHECK_CU(cuMemGetInfo(&free_before, &total_info));
  CHECK(total_info == total);

  CUdeviceptr ptr = 0;
  CHECK_CU(cuMemAlloc(&ptr, 64u << 20));
  CHECK(ptr != 0);
  size_t free_after = 0;
  CHECK_CU(cuMemGetInfo(&free_after, &total_info));
  std::printf("alloc 64MiB: free dropped by %zu\n", free_before - free_after);
  CHECK_CU(cuMemFree(ptr));

  CUmodule module;
  CHECK_CU(cuModuleLoadData(&module, "sim module image"));
  CUfunction sleep_kernel;
  CHECK_CU(cuModuleGetFunction(&sleep_kernel, module, "sim_sleep_kernel"));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent start, stop;
  CHECK_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  uint64_t ns = 2'000'000;  // 2 ms per kernel
  void* params[] = {&ns};
  CHECK_CU(cuEventRecord(start, stream));
  for (int i = 0; i < 5; ++i) CHECK_CU(cuLaunchKernel(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
  CHECK_CU(cuEventRecord(stop, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  float ms = 0;
  CHECK_CU(cuEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 9.5f && ms < 50.0f);
  std::printf("5 kernels of 2 ms: %s\n", ms >= 9.5f ? "ok" : "too fast");

  CHECK_CU(cuEventDestroy(start));
  CHECK_CU(cuEventDestroy(stop));
  CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuModuleUnload(module));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  std::printf("done\n");
  return 0;
}
