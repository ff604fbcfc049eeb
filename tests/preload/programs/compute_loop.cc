// A saturating kernel loop for the compute-limit tests (compute_test.cc): launches `sim_sleep`
// kernels of a given length back to back for a given wall time, synchronising every ~10 ms of
// work (so that without a limit the queue stays short and the GPU stays busy), then reports
// what it achieved as "key value" lines:
//   kernels N            kernels launched (all completed: the run ends with a synchronisation)
//   busy_ns B            N x kernel length: modelled GPU time of this process's kernels
//   wall_ns W            first launch to the end of the final synchronisation
//   nvml_util_percent U  the simulated NVML GPU utilisation (busy fraction of the last second)
//   buckets F:c0,c1,...  kernels launched per 100 ms of CLOCK_MONOTONIC, the first in bucket F
//                        (= monotonic ns / 100 ms), so that runs of several processes line up
//
// Usage: compute_loop <kernel_us> <run_ms> plain|ptsz|grid_async|multi_device [delay_ms]
//   delay_ms             sleep this long after initialising, before the first launch
//   plain         cuLaunchKernel / cuStreamSynchronize on a created stream
//   ptsz          cuLaunchKernel_ptsz / cuStreamSynchronize_ptsz on stream 0 (the per-thread stream)
//   grid_async    the deprecated cuLaunchGridAsync on a created stream (no kernel parameters: the
//                 kernel's length comes from VGPU_SIM_KERNEL_NS, which this program sets)
//   multi_device  the deprecated cuLaunchCooperativeKernelMultiDevice, one entry, created stream
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "sim_nvml_types.h"

namespace {

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

template <typename Pfn>
Pfn Lookup(const char* name) {
  auto fn = reinterpret_cast<Pfn>(dlsym(RTLD_DEFAULT, name));  // vgpu's export when preloaded
  CHECK(fn != nullptr);
  return fn;
}

unsigned NvmlUtilization() {
  nvmlDevice_t device;
  nvmlUtilization_t util{};
  CHECK(nvmlInit_v2() == NVML_SUCCESS);
  CHECK(nvmlDeviceGetHandleByIndex_v2(0, &device) == NVML_SUCCESS);
  CHECK(nvmlDeviceGetUtilizationRates(device, &util) == NVML_SUCCESS);
  return util.gpu;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 4 || argc == 5);
  uint64_t kernel_ns = std::strtoull(argv[1], nullptr, 10) * 1000;
  const int64_t run_ns = std::strtoll(argv[2], nullptr, 10) * 1'000'000;
  const std::string variant = argv[3];
  const bool ptsz = variant == "ptsz";
  CHECK(kernel_ns > 0 && run_ns > 0 &&
        (ptsz || variant == "plain" || variant == "grid_async" || variant == "multi_device"));
  auto launch = Lookup<PFN_cuLaunchKernel_v4000>(ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel");
  auto sync = Lookup<PFN_cuStreamSynchronize_v2000>(ptsz ? "cuStreamSynchronize_ptsz" : "cuStreamSynchronize");
  auto grid_async = Lookup<PFN_cuLaunchGridAsync_v2000>("cuLaunchGridAsync");
  auto multi_device = Lookup<PFN_cuLaunchCooperativeKernelMultiDevice_v9000>("cuLaunchCooperativeKernelMultiDevice");
  // Read by the simulated driver at cuInit: the length of kernels launched without parameters.
  if (variant == "grid_async") CHECK(setenv("VGPU_SIM_KERNEL_NS", std::to_string(kernel_ns).c_str(), 1) == 0);

  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUmodule module;
  CHECK_CU(cuModuleLoadData(&module, "sim module image"));
  CUfunction kernel;
  CHECK_CU(cuModuleGetFunction(&kernel, module, variant == "grid_async" ? "plain_kernel" : "sim_sleep_kernel"));
  CUstream stream = nullptr;
  if (!ptsz) CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  if (argc == 5) {
    const int64_t delay_ns = std::strtoll(argv[4], nullptr, 10) * 1'000'000;
    const timespec pause{delay_ns / 1'000'000'000, delay_ns % 1'000'000'000};
    nanosleep(&pause, nullptr);
  }
  void* params[] = {&kernel_ns};
  CUDA_LAUNCH_PARAMS multi{};
  multi.function = kernel;
  multi.gridDimX = multi.gridDimY = multi.gridDimZ = 1;
  multi.blockDimX = multi.blockDimY = multi.blockDimZ = 1;
  multi.hStream = stream;
  multi.kernelParams = params;
  const uint64_t batch = kernel_ns >= 10'000'000 ? 1 : 10'000'000 / kernel_ns;
  constexpr int64_t kBucketNs = 100'000'000;
  uint64_t kernels = 0;
  const int64_t start = NowNs();
  const int64_t first_bucket = start / kBucketNs;
  std::vector<uint64_t> buckets;
  for (int64_t now = start; now - start < run_ns; now = NowNs()) {
    if (variant == "grid_async") {
      CHECK_CU(grid_async(kernel, 1, 1, stream));
    } else if (variant == "multi_device") {
      CHECK_CU(multi_device(&multi, 1, 0));
    } else {
      CHECK_CU(launch(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    }
    const auto bucket = static_cast<size_t>(now / kBucketNs - first_bucket);
    if (buckets.size() <= bucket) buckets.resize(bucket + 1);
    ++buckets[bucket];
    if (++kernels % batch == 0) CHECK_CU(sync(stream));
  }
  CHECK_CU(sync(stream));
  const int64_t wall = NowNs() - start;
  const unsigned util = NvmlUtilization();

  std::printf("kernels %llu\n", static_cast<unsigned long long>(kernels));
  std::printf("busy_ns %llu\n", static_cast<unsigned long long>(kernels * kernel_ns));
  std::printf("wall_ns %lld\n", static_cast<long long>(wall));
  std::printf("nvml_util_percent %u\n", util);
  std::string counts;
  for (uint64_t c : buckets) counts += (counts.empty() ? "" : ",") + std::to_string(c);
  std::printf("buckets %lld:%s\n", static_cast<long long>(first_bucket), counts.c_str());
  if (!ptsz) CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuModuleUnload(module));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
