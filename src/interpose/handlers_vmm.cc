// Virtual memory management (cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease).
//
// Physical memory is charged per handle when it is created, on the device its properties name.
// The driver frees it only when the handle is released *and* no mapping of it remains, so the
// charge is returned at whichever of cuMemRelease and the last cuMemUnmap comes second.
#include <cuda.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"

namespace vgpu::hooks {
namespace {

struct Handle {
  int device = -1;
  uint64_t bytes = 0;
  int mappings = 0;
  bool released = false;
};

struct Mapping {
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

// VMM calls are rare (allocator set-up and growth): one mutex for all of it.
std::mutex g_vmm_mu;
std::unordered_map<CUmemGenericAllocationHandle, Handle>* g_handles = nullptr;  // guarded by g_vmm_mu
std::map<CUdeviceptr, Mapping>* g_mappings = nullptr;                           // guarded by g_vmm_mu

void EnsureTables() {
  if (g_handles == nullptr) {  // never freed: frees may arrive during exit
    g_handles = new std::unordered_map<CUmemGenericAllocationHandle, Handle>();
    g_mappings = new std::map<CUdeviceptr, Mapping>();
  }
}

// Returns the handle's charge if it is released and unmapped. REQUIRES: g_vmm_mu held.
void SettleIfGone(CUmemGenericAllocationHandle handle) {
  auto it = g_handles->find(handle);
  if (it == g_handles->end() || !it->second.released || it->second.mappings > 0) return;
  memory::Release(it->second.device, it->second.bytes);
  g_handles->erase(it);
}

}  // namespace

CUresult hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                          unsigned long long flags) {
  auto real = reinterpret_cast<Pfn_cuMemCreate>(RealCuda(kHook_cuMemCreate));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemCreate);
  if (!memory::Enabled() || handle == nullptr || prop == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, size, prop, flags);  // host-located physical memory is not device memory
  }
  const int device = memory::DeviceForOrdinal(prop->location.id);
  if (device < 0) return real(handle, size, prop, flags);
  if (!memory::ReserveUnseen(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = real(handle, size, prop, flags);
  if (result != CUDA_SUCCESS) {
    memory::Release(device, size);
  } else {
    std::lock_guard<std::mutex> lock(g_vmm_mu);
    EnsureTables();
    (*g_handles)[*handle] = Handle{device, size, 0, false};
  }
  memory::NoteInflight(device, -static_cast<int64_t>(size));
  return result;
}

CUresult hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = reinterpret_cast<Pfn_cuMemRelease>(RealCuda(kHook_cuMemRelease));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemRelease);
  const CUresult result = real(handle);
  if (result != CUDA_SUCCESS || !memory::Enabled()) return result;
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  EnsureTables();
  auto it = g_handles->find(handle);
  if (it != g_handles->end()) {
    it->second.released = true;
    SettleIfGone(handle);
  }
  return result;
}

CUresult hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                       unsigned long long flags) {
  auto real = reinterpret_cast<Pfn_cuMemMap>(RealCuda(kHook_cuMemMap));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemMap);
  const CUresult result = real(ptr, size, offset, handle, flags);
  if (result != CUDA_SUCCESS || !memory::Enabled()) return result;
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  EnsureTables();
  auto it = g_handles->find(handle);
  if (it != g_handles->end()) {
    ++it->second.mappings;
    (*g_mappings)[ptr] = Mapping{size, handle};
  }
  return result;
}

CUresult hook_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = reinterpret_cast<Pfn_cuMemUnmap>(RealCuda(kHook_cuMemUnmap));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemUnmap);
  const CUresult result = real(ptr, size);
  if (result != CUDA_SUCCESS || !memory::Enabled()) return result;
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  EnsureTables();
  // One unmap may cover several mappings: settle every mapping that starts in the range.
  for (auto it = g_mappings->lower_bound(ptr); it != g_mappings->end() && it->first < ptr + size;) {
    const CUmemGenericAllocationHandle handle = it->second.handle;
    it = g_mappings->erase(it);
    auto h = g_handles->find(handle);
    if (h != g_handles->end()) {
      --h->second.mappings;
      SettleIfGone(handle);
    }
  }
  return result;
}

}  // namespace vgpu::hooks
