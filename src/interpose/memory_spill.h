// Memory oversubscription: an allocation that does not fit a device's memory limit (or that the
// driver refuses for lack of physical memory) is served from host memory instead, when the
// container's ledger gives the device a host limit (CUDA_OVERSUBSCRIBE; docs/memory.md).
//
// A spilled allocation is managed memory (cuMemAllocManaged, CU_MEM_ATTACH_HOST) advised to live
// on the host (CU_MEM_ADVISE_SET_PREFERRED_LOCATION = host) and to be mapped by the device
// (CU_MEM_ADVISE_SET_ACCESSED_BY = the device): the GPU reads and writes it over the bus instead of
// migrating it into its own memory, so it never takes device memory from anyone and the device
// limit stays hard. (CU_MEM_ATTACH_HOST restricts nothing on the devices that may spill, which
// all have concurrent managed access; it states where the memory belongs.) Its bytes are charged
// to the device's host budget in the ledger (TrySpill), never to its device budget. If the memory
// cannot be placed on the host (advice refused), it is freed and the allocation refused: nothing
// that might land on the GPU is handed out uncounted.
//
// Devices that cannot access host-resident managed memory concurrently
// (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0, which would migrate the memory at every
// launch) and drivers without cuMemAdvise_v2 (before CUDA 12.2) never spill; this is logged once.
//
// Thread safety: every function may be called from any thread after memory::InitForCuInit.
// Not on the hot path: these run only after the device budget refused an allocation.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vgpu::memory {

// Whether an allocation on ledger device `device` may spill: its host limit is non-zero and the
// GPU of the calling thread's current context supports it (checked once per ordinal).
bool SpillAllowed(int device);

// Allocates `bytes` of host-resident managed memory (advised as above) for the current context's
// device, charged to ledger device `device`'s host budget.
// Returns CUDA_SUCCESS with *dptr set; CUDA_ERROR_OUT_OF_MEMORY when the host limit is reached
// (logged at error level, naming the limit and CUDA_OVERSUBSCRIBE_HOST_LIMIT) or the memory could
// not be placed on the host; otherwise the driver's error. The caller tracks the pointer
// (AllocKind::kSpilled) and returns the charge with ReleaseSpill after freeing it.
// REQUIRES: SpillAllowed(device), dptr != nullptr.
CUresult SpillAllocate(int device, uint64_t bytes, CUdeviceptr* dptr);

// Returns the host charge of a spilled allocation (at `ptr`) the driver has freed.
void ReleaseSpill(int device, CUdeviceptr ptr, uint64_t bytes);

// Whether [ptr, ptr + count) overlaps memory this process spilled (and has not freed). The
// prefetch and advice hooks (handlers_spill.cc) keep such memory on the host: a prefetch to a
// device, a preferred location other than the host and read-mostly (device copies) are dropped.
// NVML's per-process figure does not show managed memory that migrates onto the GPU (measured
// on the H200), so reconciliation could not catch it afterwards.
bool TouchesSpilled(CUdeviceptr ptr, uint64_t count);

}  // namespace vgpu::memory
