// Prefetch and advice on spilled memory (memory_spill.h): it must stay on the host. The driver
// would otherwise migrate it onto the GPU on request — outside the device limit, and invisible to
// NVML's per-process figure — so a prefetch to a device, a preferred location other than the host
// and read-mostly (which makes device copies) are dropped for spilled memory: they are hints,
// and the memory stays usable from the device where it is. Everything else, and every call on
// memory that did not spill, goes to the driver untouched.
#include <cuda.h>

#include "common/log.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"
#include "interpose/memory_spill.h"

namespace vgpu::hooks {
namespace {

bool ToDevice(CUdevice device) { return device != CU_DEVICE_CPU; }
bool ToDevice(const CUmemLocation& location) { return location.type == CU_MEM_LOCATION_TYPE_DEVICE; }

// Whether a prefetch towards `where` of [ptr, ptr + count) would move spilled memory onto a GPU.
template <typename Where>
bool PrefetchMovesSpill(CUdeviceptr ptr, size_t count, const Where& where) {
  if (!memory::Enabled() || !ToDevice(where) || !memory::TouchesSpilled(ptr, count)) return false;
  VGPU_DEBUG("kept %zu bytes of spilled memory on the host: a prefetch to a device was dropped", count);
  return true;
}

// Whether `advice` towards `where` could bring spilled memory onto a GPU.
template <typename Where>
bool AdviceMovesSpill(CUdeviceptr ptr, size_t count, CUmem_advise advice, const Where& where) {
  const bool moves = advice == CU_MEM_ADVISE_SET_READ_MOSTLY || advice == CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION ||
                     (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION && ToDevice(where));
  if (!moves || !memory::Enabled() || !memory::TouchesSpilled(ptr, count)) return false;
  VGPU_DEBUG("kept %zu bytes of spilled memory on the host: advice %d was dropped", count, static_cast<int>(advice));
  return true;
}

}  // namespace

CUresult hook_cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  auto real = RealCudaAs<Pfn_cuMemPrefetchAsync>(kHook_cuMemPrefetchAsync);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPrefetchAsync);
  if (PrefetchMovesSpill(devPtr, count, dstDevice)) return CUDA_SUCCESS;
  return real(devPtr, count, dstDevice, hStream);
}

CUresult hook_cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  auto real = RealCudaAs<Pfn_cuMemPrefetchAsync_ptsz>(kHook_cuMemPrefetchAsync_ptsz);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPrefetchAsync_ptsz);
  if (PrefetchMovesSpill(devPtr, count, dstDevice)) return CUDA_SUCCESS;
  return real(devPtr, count, dstDevice, hStream);
}

CUresult hook_cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream) {
  auto real = RealCudaAs<Pfn_cuMemPrefetchAsync_v2>(kHook_cuMemPrefetchAsync_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPrefetchAsync_v2);
  if (PrefetchMovesSpill(devPtr, count, location)) return CUDA_SUCCESS;
  return real(devPtr, count, location, flags, hStream);
}

CUresult hook_cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                         CUstream hStream) {
  auto real = RealCudaAs<Pfn_cuMemPrefetchAsync_v2_ptsz>(kHook_cuMemPrefetchAsync_v2_ptsz);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPrefetchAsync_v2_ptsz);
  if (PrefetchMovesSpill(devPtr, count, location)) return CUDA_SUCCESS;
  return real(devPtr, count, location, flags, hStream);
}

CUresult hook_cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  auto real = RealCudaAs<Pfn_cuMemAdvise>(kHook_cuMemAdvise);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAdvise);
  if (AdviceMovesSpill(devPtr, count, advice, device)) return CUDA_SUCCESS;
  return real(devPtr, count, advice, device);
}

CUresult hook_cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  auto real = RealCudaAs<Pfn_cuMemAdvise_v2>(kHook_cuMemAdvise_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAdvise_v2);
  if (AdviceMovesSpill(devPtr, count, advice, location)) return CUDA_SUCCESS;
  return real(devPtr, count, advice, location);
}

}  // namespace vgpu::hooks
