// What the application sees: cuMemGetInfo, cuDeviceTotalMem and NVML's memory info report the
// container's limit as the device's total, and a free figure that can really be allocated: the
// limit minus everything the container's processes hold (read fresh from NVML at each query)
// minus the headroom admission keeps (memory::Headroom), never more than the device really has
// free.
#include <cuda.h>

#include <algorithm>
#include <climits>
#include <string>

#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"
#include "interpose/memory_pools.h"
#include "interpose/registration.h"
#include "interpose/runtime.h"

namespace vgpu::hooks {
namespace {

struct View {
  uint64_t total;
  uint64_t free;
  uint64_t used;
  uint64_t headroom;  // kept free by admission: neither used nor free
};

// Applies the limit of ledger device `device` to the driver's physical figures.
View Limited(int device, uint64_t physical_total, uint64_t physical_free) {
  const uint64_t limit = memory::Limit(device);
  if (limit == 0) return {physical_total, physical_free, physical_total - std::min(physical_free, physical_total), 0};
  const uint64_t total = std::min(limit, physical_total);
  const uint64_t used = std::min(memory::Used(device), total);
  // Kept back by admission: the headroom, and what a stream-ordered allocation reserves ahead.
  const uint64_t headroom = std::min(memory::Headroom(device) + memory::PoolReserveAhead(device), total - used);
  const uint64_t free = std::min(physical_free, total - used - headroom);
  return {total, free, used, headroom};
}

// Current device's view, or false when no limit applies. The query reads NVML afresh: memory
// the driver added since the last reading (a library's first use loads its kernels: +92 MiB at
// PyTorch's first tensor on an H200) would otherwise be counted as free.
bool CurrentView(uint64_t physical_total, uint64_t physical_free, View* view) {
  if (!memory::Enabled()) return false;
  const int device = memory::CurrentDevice();
  if (device < 0 || memory::Limit(device) == 0) return false;
  memory::RefreshAllPools();  // pools may have released memory at a synchronisation
  memory::Reconcile(device);
  *view = Limited(device, physical_total, physical_free);
  return true;
}

}  // namespace

CUresult hook_cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto real = reinterpret_cast<Pfn_cuMemGetInfo_v2>(RealCuda(kHook_cuMemGetInfo_v2));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemGetInfo_v2);
  const CUresult result = real(free, total);
  View view;
  if (result != CUDA_SUCCESS || free == nullptr || total == nullptr || !CurrentView(*total, *free, &view)) {
    return result;
  }
  *total = view.total;
  *free = view.free;
  return result;
}

CUresult hook_cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t free64 = 0, total64 = 0;
  const CUresult result = hook_cuMemGetInfo_v2(&free64, &total64);
  if (result == CUDA_SUCCESS) {
    *free = static_cast<unsigned int>(std::min<size_t>(free64, UINT_MAX));
    *total = static_cast<unsigned int>(std::min<size_t>(total64, UINT_MAX));
  }
  return result;
}

CUresult hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuDeviceTotalMem_v2>(RealCuda(kHook_cuDeviceTotalMem_v2));
  if (real == nullptr) return MissingCudaEntry(kHook_cuDeviceTotalMem_v2);
  const CUresult result = real(bytes, dev);
  if (result != CUDA_SUCCESS || bytes == nullptr || !memory::Enabled()) return result;
  const int device = memory::DeviceForOrdinal(static_cast<int>(dev));
  const uint64_t limit = device >= 0 ? memory::Limit(device) : 0;
  if (limit != 0) *bytes = std::min<uint64_t>(*bytes, limit);
  return result;
}

CUresult hook_cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes64 = 0;
  const CUresult result = hook_cuDeviceTotalMem_v2(&bytes64, dev);
  if (result == CUDA_SUCCESS) *bytes = static_cast<unsigned int>(std::min<size_t>(bytes64, UINT_MAX));
  return result;
}

// --- NVML -------------------------------------------------------------------------------------

namespace {

// Ledger device of an NVML device handle, opening the ledger if this process has not (nvidia-smi
// never calls cuInit). -1 when no limit applies.
int NvmlDeviceToLedger(nvmlDevice_t device) {
  const Runtime& runtime = GetRuntime();
  if (runtime.passthrough()) return -1;
  if (!memory::Enabled()) {
    // Limits come from the environment or from the ledger vgpu-node named at registration.
    if (!runtime.config.HasAnyMemoryLimit() && !registration::HasLedger()) return -1;
    std::string error;
    if (!memory::InitForCuInit(&error)) return -1;
  }
  char uuid[96] = {};
  if (g_nvml.nvmlDeviceGetUUID == nullptr || g_nvml.nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) != NVML_SUCCESS) {
    return -1;
  }
  const int ledger_device = memory::DeviceForUuid(uuid);
  return ledger_device >= 0 && memory::Limit(ledger_device) != 0 ? ledger_device : -1;
}

}  // namespace

namespace {

// Both NVML structures have total/free/used, with free = total - used - reserved the same as
// cuMemGetInfo's free. v2 reports the headroom as `reserved`; v1 has no such field and counts it
// in `used` (used + free = total, as the driver's v1 figures do).
template <typename Memory>
void ApplyLimit(nvmlDevice_t device, Memory* memory) {
  const int ledger_device = NvmlDeviceToLedger(device);
  if (ledger_device < 0) return;
  memory::RefreshAllPools();
  memory::RefreshFromDriver(ledger_device);
  const View view = Limited(ledger_device, memory->total, memory->free);
  memory->total = view.total;
  memory->free = view.free;
  if constexpr (requires { memory->reserved; }) {
    memory->used = view.used;
    memory->reserved = view.headroom;
  } else {
    memory->used = view.used + view.headroom;
  }
}

}  // namespace

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  auto real = reinterpret_cast<Pfn_nvmlDeviceGetMemoryInfo>(RealNvml(kHook_nvmlDeviceGetMemoryInfo));
  if (real == nullptr) return MissingNvmlEntry(kHook_nvmlDeviceGetMemoryInfo);
  const nvmlReturn_t result = real(device, memory);
  if (result == NVML_SUCCESS && memory != nullptr) ApplyLimit(device, memory);
  return result;
}

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  auto real = reinterpret_cast<Pfn_nvmlDeviceGetMemoryInfo_v2>(RealNvml(kHook_nvmlDeviceGetMemoryInfo_v2));
  if (real == nullptr) return MissingNvmlEntry(kHook_nvmlDeviceGetMemoryInfo_v2);
  const nvmlReturn_t result = real(device, memory);
  if (result == NVML_SUCCESS && memory != nullptr) ApplyLimit(device, memory);
  return result;
}

}  // namespace vgpu::hooks
