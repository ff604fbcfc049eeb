// What a process is told about device memory, and whether it matches what it can allocate.
//
//   memory_info report   totals and free figures from every query (cuDeviceTotalMem v1/v2,
//                        cuMemGetInfo v1/v2, NVML memory info v1/v2 of device 0), how they move
//                        when 256 MiB is allocated (if that fits), then one allocation of exactly the reported
//                        free figure (rounded down to 2 MiB) followed by 2 MiB allocations until
//                        refused ("extra" = what was allocatable beyond the reported free).
//                        Hold point "full" while everything is allocated.
//   memory_info host     pinned host memory (cuMemAllocHost 3 x 256 MiB, cuMemHostAlloc
//                        256 MiB) must not change the device's free figure; then 64 MiB device
//                        allocations until refused. Hold point "pinned" after the host
//                        allocations.
// If the primary context cannot be created, prints "context_error <code>" and exits 0.
#include <cuda.h>

#include <string>
#include <vector>

#include "memory_common.h"
#include "sim_nvml_types.h"

namespace {

using memtest::kMiB;
using memtest::Report;

#define CHECK_NVML(expr) CHECK((expr) == NVML_SUCCESS)

constexpr uint64_t kStep = 2 * kMiB;

bool CreateContext(CUdevice* dev) {
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(dev, 0));
  CUcontext ctx;
  const CUresult rc = cuDevicePrimaryCtxRetain(&ctx, *dev);
  if (rc != CUDA_SUCCESS) {
    Report("context_error", rc);
    return false;
  }
  CHECK_CU(cuCtxSetCurrent(ctx));
  return true;
}

void ReportNvml(const char* prefix, nvmlDevice_t nvml_dev) {
  nvmlMemory_t v1{};
  CHECK_NVML(nvmlDeviceGetMemoryInfo(nvml_dev, &v1));
  const std::string p = prefix;
  Report((p + "nvml_v1_total").c_str(), v1.total);
  Report((p + "nvml_v1_free").c_str(), v1.free);
  Report((p + "nvml_v1_used").c_str(), v1.used);
  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  CHECK_NVML(nvmlDeviceGetMemoryInfo_v2(nvml_dev, &v2));
  Report((p + "nvml_v2_total").c_str(), v2.total);
  Report((p + "nvml_v2_reserved").c_str(), v2.reserved);
  Report((p + "nvml_v2_free").c_str(), v2.free);
  Report((p + "nvml_v2_used").c_str(), v2.used);
}

int ReportMode() {
  CUdevice dev;
  if (!CreateContext(&dev)) return 0;
  size_t total_v2 = 0;
  CHECK_CU(cuDeviceTotalMem(&total_v2, dev));
  Report("device_total_v2", total_v2);
  void* fn = nullptr;
  CHECK_CU(cuGetProcAddress("cuDeviceTotalMem", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  unsigned total_v1 = 0;
  CHECK_CU(reinterpret_cast<CUresult(CUDAAPI*)(unsigned*, CUdevice)>(fn)(&total_v1, dev));
  Report("device_total_v1", total_v1);
  CHECK_CU(cuGetProcAddress("cuMemGetInfo", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  unsigned free_v1 = 0, info_total_v1 = 0;
  CHECK_CU(reinterpret_cast<CUresult(CUDAAPI*)(unsigned*, unsigned*)>(fn)(&free_v1, &info_total_v1));
  Report("info_free_v1", free_v1);
  Report("info_total_v1", info_total_v1);
  size_t free0 = 0, total0 = 0;
  CHECK_CU(cuMemGetInfo(&free0, &total0));
  Report("info_free", free0);
  Report("info_total", total0);

  CHECK_NVML(nvmlInit_v2());
  nvmlDevice_t nvml_dev;
  CHECK_NVML(nvmlDeviceGetHandleByIndex_v2(0, &nvml_dev));
  ReportNvml("", nvml_dev);

  // 256 MiB: every free figure must drop by exactly that much.
  CUdeviceptr p256 = 0;
  const CUresult rc256 = cuMemAlloc(&p256, 256 * kMiB);
  Report("alloc_256_code", rc256);
  if (rc256 == CUDA_SUCCESS) {
    Report("info_free_after_256", memtest::FreeBytes());
    ReportNvml("after_256_", nvml_dev);
    CHECK_CU(cuMemFree(p256));
    Report("info_free_after_256_freed", memtest::FreeBytes());
  }

  // Allocate what cuMemGetInfo says is free, then see whether anything is left beyond it.
  std::vector<CUdeviceptr> held;
  const uint64_t free_now = memtest::FreeBytes();
  const uint64_t exact = free_now / kStep * kStep;
  Report("exact_fill_bytes", exact);
  if (exact > 0) {
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAlloc(&p, exact);
    Report("exact_fill_code", rc);
    if (rc == CUDA_SUCCESS) held.push_back(p);
  }
  uint64_t extra = 0;
  CUresult extra_rc = CUDA_SUCCESS;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUdeviceptr p = 0;
    extra_rc = cuMemAlloc(&p, kStep);
    if (extra_rc != CUDA_SUCCESS) break;
    held.push_back(p);
    extra += kStep;
  }
  Report("extra_bytes", extra);
  Report("extra_refusal_code", extra_rc);
  Report("info_free_at_full", memtest::FreeBytes());
  ReportNvml("full_", nvml_dev);
  memtest::HoldPoint("full");
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree(p));
  Report("info_free_final", memtest::FreeBytes());
  CHECK_NVML(nvmlShutdown());
  return 0;
}

int HostMode() {
  CUdevice dev;
  if (!CreateContext(&dev)) return 0;
  const uint64_t free0 = memtest::FreeBytes();
  Report("info_free_before_host", free0);
  std::vector<void*> host;
  for (int i = 0; i < 3; ++i) {
    void* h = nullptr;
    const CUresult rc = cuMemAllocHost(&h, 256 * kMiB);
    Report("alloc_host_code", rc);
    if (rc == CUDA_SUCCESS) host.push_back(h);
  }
  void* h = nullptr;
  const CUresult rc = cuMemHostAlloc(&h, 256 * kMiB, CU_MEMHOSTALLOC_PORTABLE);
  Report("host_alloc_code", rc);
  if (rc == CUDA_SUCCESS) host.push_back(h);
  Report("host_bytes", host.size() * 256 * kMiB);
  Report("info_free_after_host", memtest::FreeBytes());
  memtest::HoldPoint("pinned");

  std::vector<CUdeviceptr> device;
  CUresult dev_rc = CUDA_SUCCESS;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUdeviceptr p = 0;
    dev_rc = cuMemAlloc(&p, 64 * kMiB);
    if (dev_rc != CUDA_SUCCESS) break;
    device.push_back(p);
  }
  Report("device_bytes", device.size() * 64 * kMiB);
  Report("device_refusal_code", dev_rc);
  for (CUdeviceptr p : device) CHECK_CU(cuMemFree(p));
  for (void* p : host) CHECK_CU(cuMemFreeHost(p));
  Report("info_free_final", memtest::FreeBytes());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "report") return ReportMode();
  if (mode == "host") return HostMode();
  std::fprintf(stderr, "usage: memory_info report|host\n");
  return 2;
}
