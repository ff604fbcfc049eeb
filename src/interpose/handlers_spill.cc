// Prefetch and advice on spilled memory (memory_spill.h): it must stay on the host. The driver
// would otherwise migrate it onto the GPU on request — outside the device limit, and invisible to
// NVML's per-process figure — so a prefetch to a device, a preferred location other than the host
// and read-mostly (which makes device copies) are dropped for spilled memory: they are hints,
// and the memory stays usable from the device where it is. Everything else, and every call on
// memory that did not spill, goes to the driver untouched. A batch prefetch (CUDA 13:
// cuMemPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync) loses only the operations that would
// bring spilled memory onto a GPU; the others go to the driver as one batch. A dropped operation of
// a discard-and-prefetch keeps its data: a discard is a hint too (the contents become undefined,
// and keeping them is one of the things undefined allows).
#include <cuda.h>

#include <vector>

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

// A CUDA 13 batch (cuMemPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync): operation i
// prefetches [dptrs[i], dptrs[i] + sizes[i]) to locations[k], the last k with first_op[k] <= i.
// Returns the batch without the operations that would bring spilled memory onto a GPU; `dropped`
// counts them. A batch whose shape the driver would refuse is left alone (the driver says why).
struct Batch {
  std::vector<CUdeviceptr> dptrs;
  std::vector<size_t> sizes;
  std::vector<CUmemLocation> locations;
  std::vector<size_t> first_op;
  size_t dropped = 0;
};

bool WellFormed(const CUdeviceptr* dptrs, const size_t* sizes, size_t count, const CUmemLocation* locations,
                const size_t* first_op, size_t num_locations) {
  if (dptrs == nullptr || sizes == nullptr || locations == nullptr || first_op == nullptr) return false;
  if (count == 0 || num_locations == 0 || num_locations > count || first_op[0] != 0) return false;
  for (size_t k = 1; k < num_locations; ++k) {
    if (first_op[k] <= first_op[k - 1] || first_op[k] >= count) return false;
  }
  return true;
}

Batch WithoutSpillMoves(const CUdeviceptr* dptrs, const size_t* sizes, size_t count, const CUmemLocation* locations,
                        const size_t* first_op, size_t num_locations) {
  Batch kept;
  size_t k = 0;
  bool location_open = false;  // whether `kept` already holds locations[k]
  for (size_t i = 0; i < count; ++i) {
    if (k + 1 < num_locations && first_op[k + 1] == i) {
      ++k;
      location_open = false;
    }
    if (ToDevice(locations[k]) && memory::TouchesSpilled(dptrs[i], sizes[i])) {
      ++kept.dropped;
      continue;
    }
    if (!location_open) {
      kept.locations.push_back(locations[k]);
      kept.first_op.push_back(kept.dptrs.size());
      location_open = true;
    }
    kept.dptrs.push_back(dptrs[i]);
    kept.sizes.push_back(sizes[i]);
  }
  return kept;
}

// The batch entries share one signature; `id` names the caller's entry, whose driver ABI is called.
template <typename Pfn>
CUresult PrefetchBatch(HookId id, CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* locations,
                       size_t* first_op, size_t num_locations, unsigned long long flags, CUstream stream) {
  auto real = RealCudaAs<Pfn>(id);
  if (real == nullptr) return MissingCudaEntry(id);
  if (!memory::Enabled() || !WellFormed(dptrs, sizes, count, locations, first_op, num_locations)) {
    return real(dptrs, sizes, count, locations, first_op, num_locations, flags, stream);
  }
  Batch kept = WithoutSpillMoves(dptrs, sizes, count, locations, first_op, num_locations);
  if (kept.dropped == 0) return real(dptrs, sizes, count, locations, first_op, num_locations, flags, stream);
  VGPU_DEBUG("kept spilled memory on the host: %zu of %zu operations of a batch prefetch to a device were dropped",
             kept.dropped, count);
  if (kept.dptrs.empty()) return CUDA_SUCCESS;
  return real(kept.dptrs.data(), kept.sizes.data(), kept.dptrs.size(), kept.locations.data(), kept.first_op.data(),
              kept.locations.size(), flags, stream);
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

CUresult hook_cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
    size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return PrefetchBatch<Pfn_cuMemPrefetchBatchAsync>(kHook_cuMemPrefetchBatchAsync,
      dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

CUresult hook_cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
    size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return PrefetchBatch<Pfn_cuMemPrefetchBatchAsync_ptsz>(kHook_cuMemPrefetchBatchAsync_ptsz,
      dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

CUresult hook_cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
    size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return PrefetchBatch<Pfn_cuMemDiscardAndPrefetchBatchAsync>(kHook_cuMemDiscardAndPrefetchBatchAsync,
      dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

CUresult hook_cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
    size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return PrefetchBatch<Pfn_cuMemDiscardAndPrefetchBatchAsync_ptsz>(kHook_cuMemDiscardAndPrefetchBatchAsync_ptsz,
      dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

}  // namespace vgpu::hooks
