// TEST DOUBLE ONLY: managed memory of the simulated driver — where its pages are, as far as
// device memory accounting can tell, and the advice and prefetch calls that move them.
//
// Model (no page granularity; a call applies to the whole allocation containing its range):
//   - cuMemAllocManaged with CU_MEM_ATTACH_GLOBAL: resident on the context's device from the
//     start, charged like device memory (the worst case a real GPU can reach by touching it);
//     with CU_MEM_ATTACH_HOST: on the host, not charged to any device.
//   - cuMemPrefetchAsync to a device moves it there (charged; CUDA_ERROR_OUT_OF_MEMORY when the
//     device is full: a simplification, the real driver would evict), to the host moves it off
//     the device (no longer charged).
//   - cuMemPrefetchBatchAsync / cuMemDiscardAndPrefetchBatchAsync (CUDA 13) do the same per
//     operation of the batch (a discard moves no data).
//   - cuMemAdvise records the preferred location and the accessing devices; like the real
//     driver's advice it moves nothing by itself.
//   - cuMemRangeGetAttribute reports the advice and the last prefetch location;
//     cuPointerGetAttribute reports IS_MANAGED, MEMORY_TYPE (device) and DEVICE_ORDINAL of any
//     allocation made with cuMemAlloc* / cuMemAllocManaged / pools.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// The allocation containing [ptr, ptr + count), or nullptr.
Allocation* Containing(CUdeviceptr ptr, uint64_t count) {
  auto& allocations = Rt().allocations;
  auto it = allocations.upper_bound(ptr);
  if (it == allocations.begin()) return nullptr;
  --it;
  const uint64_t extent = std::max(it->second.requested, it->second.size);
  if (ptr < it->first || ptr - it->first >= extent || count > extent - (ptr - it->first)) return nullptr;
  return &it->second;
}

Allocation* ManagedRange(CUdeviceptr ptr, uint64_t count) {
  Allocation* allocation = count == 0 ? nullptr : Containing(ptr, count);
  return allocation != nullptr && allocation->managed ? allocation : nullptr;
}

// A location as the model stores it: CU_DEVICE_CPU or a physical device; kNoLocation when invalid.
int FromLocation(const CUmemLocation& location) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return CU_DEVICE_CPU;
    case CU_MEM_LOCATION_TYPE_DEVICE: {
      const int physical = Physical(location.id);
      return physical < 0 ? kNoLocation : physical;
    }
    default:
      return kNoLocation;
  }
}

// The v1 ABIs' CUdevice (CU_DEVICE_CPU = the host) as a location.
CUmemLocation FromDevice(CUdevice device) {
  CUmemLocation location{};
  location.type = device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device == CU_DEVICE_CPU ? 0 : device;
  return location;
}

// Location as the API reports it: CU_DEVICE_CPU, a CUDA ordinal, or CU_DEVICE_INVALID.
int Reported(int location) {
  if (location == CU_DEVICE_CPU) return CU_DEVICE_CPU;
  if (location < 0) return CU_DEVICE_INVALID;
  return static_cast<int>(Ordinal(location));
}

CUresult Advise(CUdeviceptr ptr, uint64_t count, CUmem_advise advice, const CUmemLocation& where) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const int location = FromLocation(where);
  Allocation* allocation = ManagedRange(ptr, count);
  if (allocation == nullptr || location == kNoLocation) return CUDA_ERROR_INVALID_VALUE;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      allocation->preferred = location;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      allocation->preferred = kNoLocation;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
      if (location == CU_DEVICE_CPU) return CUDA_SUCCESS;  // the host always has access
      allocation->accessed_by.insert(location);
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      allocation->accessed_by.erase(location);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Moves a managed allocation to `location` (CU_DEVICE_CPU or a physical device).
// REQUIRES: Runtime::mu held.
CUresult MoveManaged(Allocation* allocation, int location) {
  if (location == CU_DEVICE_CPU) {
    if (allocation->resident) State().Uncharge(allocation->device, allocation->size);
    allocation->resident = false;
  } else if (!allocation->resident || allocation->device != location) {
    if (!State().TryCharge(location, allocation->size)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (allocation->resident) State().Uncharge(allocation->device, allocation->size);
    allocation->device = location;
    allocation->resident = true;
  }
  allocation->last_prefetch = location;
  return CUDA_SUCCESS;
}

CUresult Prefetch(CUdeviceptr ptr, uint64_t count, const CUmemLocation& where, CUstream stream, bool per_thread) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const int location = FromLocation(where);
  Stream* resolved = nullptr;
  if (const CUresult rc = ResolveStream(stream, per_thread, &resolved); rc != CUDA_SUCCESS) return rc;
  Allocation* allocation = ManagedRange(ptr, count);
  if (allocation == nullptr || location == kNoLocation) return CUDA_ERROR_INVALID_VALUE;
  return MoveManaged(allocation, location);
}

// cuMemPrefetchBatchAsync / cuMemDiscardAndPrefetchBatchAsync (CUDA 13): operation i moves the
// allocation holding [dptrs[i], dptrs[i] + sizes[i]) to locations[k], the last k with
// first_op[k] <= i. The arguments are checked as the CUDA documentation states them (first_op
// starts at 0 and increases, num_locations <= count, flags 0, not the legacy NULL stream), and
// every range before anything moves; then the operations run in order (the first that does not
// fit the device stops the batch with CUDA_ERROR_OUT_OF_MEMORY). A discard moves no data here.
CUresult PrefetchBatch(const CUdeviceptr* dptrs, const size_t* sizes, size_t count, const CUmemLocation* locations,
                       const size_t* first_op, size_t num_locations, unsigned long long flags, CUstream stream,
                       bool per_thread) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (dptrs == nullptr || sizes == nullptr || locations == nullptr || first_op == nullptr || count == 0 ||
      num_locations == 0 || num_locations > count || first_op[0] != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t k = 1; k < num_locations; ++k) {
    if (first_op[k] <= first_op[k - 1] || first_op[k] >= count) return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream == CU_STREAM_LEGACY || (stream == nullptr && !per_thread)) return CUDA_ERROR_INVALID_VALUE;
  Stream* resolved = nullptr;
  if (const CUresult rc = ResolveStream(stream, per_thread, &resolved); rc != CUDA_SUCCESS) return rc;
  std::vector<std::pair<Allocation*, int>> moves;
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    if (k + 1 < num_locations && first_op[k + 1] == i) ++k;
    Allocation* allocation = ManagedRange(dptrs[i], sizes[i]);
    const int location = FromLocation(locations[k]);
    if (allocation == nullptr || location == kNoLocation) return CUDA_ERROR_INVALID_VALUE;
    moves.emplace_back(allocation, location);
  }
  for (const auto& [allocation, location] : moves) {
    if (const CUresult rc = MoveManaged(allocation, location); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult RangeAttribute(void* data, size_t size, CUmem_range_attribute attribute, CUdeviceptr ptr, size_t count) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const Allocation* allocation = ManagedRange(ptr, count);
  if (allocation == nullptr || data == nullptr || size < sizeof(int) || size % sizeof(int) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int* out = static_cast<int*>(data);
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
      *out = 0;
      return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
      *out = Reported(allocation->preferred);
      return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
      *out = Reported(allocation->last_prefetch);
      return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      const size_t slots = size / sizeof(int);
      size_t i = 0;
      for (const int device : allocation->accessed_by) {
        if (i < slots) out[i++] = Reported(device);
      }
      for (; i < slots; ++i) out[i] = CU_DEVICE_INVALID;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult PointerAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const Allocation* allocation = Containing(ptr, 1);
  if (allocation == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: {
      const unsigned int managed = allocation->managed ? 1 : 0;
      std::memcpy(data, &managed, sizeof(managed));
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
      const unsigned int type = CU_MEMORYTYPE_DEVICE;
      std::memcpy(data, &type, sizeof(type));
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      const int ordinal = static_cast<int>(Ordinal(allocation->device));
      std::memcpy(data, &ordinal, sizeof(ordinal));
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

CUresult AllocManaged(Context* ctx, uint64_t bytes, unsigned flags, CUdeviceptr* out) {
  if (flags == CU_MEM_ATTACH_GLOBAL) {
    const CUresult rc = AllocDevice(ctx, bytes, false, out);
    if (rc == CUDA_SUCCESS) Rt().allocations[*out].managed = true;
    return rc;
  }
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t size = RoundUp(bytes, Cfg().granularity);
  if (size < bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUdeviceptr base = ReserveAddress(ctx->device, size, Cfg().granularity, false, false);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation allocation;
  allocation.requested = bytes;
  allocation.size = size;
  allocation.device = ctx->device;
  allocation.ctx = ctx;
  allocation.managed = true;
  allocation.resident = false;
  Rt().allocations[base] = allocation;
  *out = base;
  return CUDA_SUCCESS;
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  return Guarded([&] { return Advise(devPtr, count, advice, FromDevice(device)); });
}

SIM_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  return Guarded([&] { return Advise(devPtr, count, advice, location); });
}

SIM_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  return Guarded([&] { return Prefetch(devPtr, count, FromDevice(dstDevice), hStream, false); });
}

SIM_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  return Guarded([&] { return Prefetch(devPtr, count, FromDevice(dstDevice), hStream, true); });
}

SIM_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                          CUstream hStream) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Prefetch(devPtr, count, location, hStream, false); });
}

SIM_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                               unsigned int flags, CUstream hStream) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Prefetch(devPtr, count, location, hStream, true); });
}

SIM_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
                                            size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                            CUstream hStream) {
  return Guarded([&] {
    return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, false);
  });
}

SIM_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                 CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                 size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return Guarded([&] {
    return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, true);
  });
}

SIM_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                      CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                      size_t numPrefetchLocs, unsigned long long flags,
                                                      CUstream hStream) {
  return Guarded([&] {
    return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, false);
  });
}

SIM_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                           CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                           size_t numPrefetchLocs, unsigned long long flags,
                                                           CUstream hStream) {
  return Guarded([&] {
    return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, true);
  });
}

SIM_EXPORT CUresult cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute attribute,
                                           CUdeviceptr devPtr, size_t count) {
  return Guarded([&] { return RangeAttribute(data, dataSize, attribute, devPtr, count); });
}

SIM_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return Guarded([&] { return PointerAttribute(data, attribute, ptr); });
}
