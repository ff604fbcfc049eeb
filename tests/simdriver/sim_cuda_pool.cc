// TEST DOUBLE ONLY: stream-ordered memory pools of the simulated driver.
//
// Model (after the default pool of an H200 with driver 580): a pool owns an address range in which
// it backs chunks of VGPU_SIM_POOL_CHUNK (32 MiB) with device memory; reserved memory (the backed
// chunks) is what the device is charged. A block (rounded to 512 bytes) must lie in one piece of
// the range: it goes to the lowest gap between live blocks whose chunks are all backed, else to
// the gap that needs the fewest new chunks (the tail of the last block plus fresh chunks, as the
// H200's pool grows by less than the block at times). Freed blocks leave holes, so the unused
// reserve is fragmented: it can exceed a block and still not hold it. At synchronisation points
// (stream, event and context synchronize) each pool of the device releases chunks that hold no
// block, highest first, while it keeps at least its release threshold; cuMemPoolTrimTo does the
// same with its own minimum. A chunk shared with a live block is never released.
#include <algorithm>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

constexpr uint64_t kBlockAlignment = 512;
constexpr uint64_t kPoolSpan = 1ull << 38;  // each pool's address range (256 GiB)

// Chunks [first, last] that a block at [start, end) lies on.
uint64_t FirstChunk(uint64_t start) { return start / Cfg().pool_chunk; }
uint64_t LastChunk(uint64_t end) { return (end - 1) / Cfg().pool_chunk; }

uint64_t UnbackedChunks(const Pool* pool, uint64_t start, uint64_t end) {
  uint64_t n = 0;
  for (uint64_t c = FirstChunk(start); c <= LastChunk(end); ++c) {
    if (c >= pool->backed.size() || !pool->backed[c]) ++n;
  }
  return n;
}

// Releases chunks that hold no block, highest first, while at least `keep` stays reserved.
void TrimPool(Pool* pool, uint64_t keep) {
  const uint64_t chunk = Cfg().pool_chunk;
  std::vector<bool> occupied(pool->backed.size(), false);
  for (const auto& [offset, size] : pool->blocks) {
    for (uint64_t c = FirstChunk(offset); c <= LastChunk(offset + size) && c < occupied.size(); ++c) occupied[c] = true;
  }
  for (size_t c = pool->backed.size(); c-- > 0 && pool->reserved >= chunk && pool->reserved - chunk >= keep;) {
    if (!pool->backed[c] || occupied[c]) continue;
    pool->backed[c] = false;
    pool->reserved -= chunk;
    State().Uncharge(pool->device, chunk);
  }
}

Pool* NewPool(int device, bool is_default) {
  auto* pool = NewHandle<Pool>(HandleType::kPool);
  pool->device = device;
  pool->is_default = is_default;
  pool->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  pool->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  pool->props.location.id = Ordinal(device);
  return pool;
}

CUresult AllocAsync(CUdeviceptr* dptr, size_t bytes, Pool* pool, CUstream handle, bool ptsz) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CaptureMemAlloc(stream, bytes, dptr);
  if (pool == nullptr) {
    pool = Rt().current_pool[stream->ctx->device];
    if (pool == nullptr) pool = DefaultPool(stream->ctx->device);
  }
  return PoolAlloc(pool, bytes, dptr);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream handle, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CaptureMemFree(stream, dptr);
  return FreeDevice(dptr);
}

CUresult PoolArg(CUmemoryPool handle, Pool** out) {
  *out = Lookup<Pool>(handle, HandleType::kPool);
  return *out == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

}  // namespace

Pool* DefaultPool(int device) {
  auto& slot = Rt().default_pool[device];
  if (slot == nullptr) slot = NewPool(device, true);
  return slot;
}

CUresult PoolAlloc(Pool* pool, uint64_t bytes, CUdeviceptr* out) {
  const uint64_t block = RoundUp(bytes, kBlockAlignment);
  if (block < bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  // The driver's own memory for stream-ordered allocation, set up at the process's first use on
  // the device (about 70 MiB on an H200 with driver 580) and held until the process exits.
  if (!Rt().pool_setup[pool->device] && Cfg().pool_setup_bytes > 0) {
    if (!State().TryCharge(pool->device, Cfg().pool_setup_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    Rt().pool_setup[pool->device] = true;
  }
  if (pool->base == 0) {
    pool->base = ReserveAddress(pool->device, kPoolSpan, Cfg().pool_chunk, false, false);
    if (pool->base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Where the block goes: the lowest gap that needs no new chunk, else the one that needs fewest.
  uint64_t best = kPoolSpan, best_fresh = UINT64_MAX;
  auto consider = [&](uint64_t gap_start, uint64_t gap_end) {
    const uint64_t start = RoundUp(gap_start, kBlockAlignment);
    if (best_fresh == 0 || start >= gap_end || gap_end - start < block) return;
    const uint64_t fresh = UnbackedChunks(pool, start, start + block);
    if (fresh < best_fresh) {
      best = start;
      best_fresh = fresh;
    }
  };
  uint64_t gap_start = 0;
  for (const auto& [offset, size] : pool->blocks) {
    consider(gap_start, offset);
    gap_start = offset + size;
  }
  consider(gap_start, kPoolSpan);
  if (best_fresh == UINT64_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t grow = best_fresh * Cfg().pool_chunk;
  if (grow > 0) {
    if (pool->props.maxSize != 0 && pool->reserved + grow > pool->props.maxSize) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!State().TryCharge(pool->device, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pool->backed.size() <= LastChunk(best + block)) pool->backed.resize(LastChunk(best + block) + 1, false);
    for (uint64_t c = FirstChunk(best); c <= LastChunk(best + block); ++c) pool->backed[c] = true;
    pool->reserved += grow;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  }
  pool->blocks[best] = block;
  const CUdeviceptr base = pool->base + best;
  pool->used += block;
  pool->used_high = std::max(pool->used_high, pool->used);
  Allocation allocation;
  allocation.requested = bytes;
  allocation.size = block;
  allocation.device = pool->device;
  allocation.kind = AllocKind::kPool;
  allocation.pool = pool;
  Rt().allocations[base] = allocation;
  *out = base;
  return CUDA_SUCCESS;
}

void PoolFree(CUdeviceptr base) {
  auto it = Rt().allocations.find(base);
  Pool* pool = it->second.pool;
  pool->used -= std::min(pool->used, it->second.size);
  pool->blocks.erase(base - pool->base);
  Rt().allocations.erase(it);
}

void TrimPools(int device) {
  for (const auto& [handle, type] : Rt().handles) {
    if (type != HandleType::kPool) continue;
    auto* pool = static_cast<Pool*>(const_cast<void*>(handle));
    if (pool->device == device) TrimPool(pool, pool->release_threshold);
  }
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = reinterpret_cast<CUmemoryPool>(DefaultPool(physical));
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    Pool* pool = Rt().current_pool[physical];
    *pool_out = reinterpret_cast<CUmemoryPool>(pool != nullptr ? pool : DefaultPool(physical));
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    if (pool->device != physical) return CUDA_ERROR_INVALID_DEVICE;
    Rt().current_pool[physical] = pool;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool_out, const CUmemPoolProps* props) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pool_out == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int physical = Physical(props->location.id);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    Pool* pool = NewPool(physical, false);
    pool->props = *props;
    *pool_out = reinterpret_cast<CUmemoryPool>(pool);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    if (pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    // Outstanding blocks die with the pool in this model.
    auto& allocations = Rt().allocations;
    for (auto it = allocations.begin(); it != allocations.end();) {
      if (it->second.pool == pool) {
        it = allocations.erase(it);
      } else {
        ++it;
      }
    }
    State().Uncharge(pool->device, pool->reserved);
    if (pool->base != 0) ReleaseAddress(pool->base);
    if (Rt().current_pool[pool->device] == pool) Rt().current_pool[pool->device] = nullptr;
    DeleteHandle(pool);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    return AllocAsync(dptr, bytesize, nullptr, s, false);
  });
}
SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    return AllocAsync(dptr, bytesize, nullptr, s, true);
  });
}
SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool handle, CUstream s) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    return AllocAsync(dptr, bytesize, pool, s, false);
  });
}
SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool handle,
                                                 CUstream s) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    return AllocAsync(dptr, bytesize, pool, s, true);
  });
}
SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return Guarded([&] { return FreeAsync(dptr, s, false); }); }
SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return Guarded([&] { return FreeAsync(dptr, s, true); });
}

SIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool handle, size_t minBytesToKeep) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    TrimPool(pool, minBytesToKeep);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *static_cast<int*>(value);
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *static_cast<cuuint64_t*>(value);
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:  // only a reset to 0 is allowed
        if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->reserved_high = pool->reserved;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->used_high = pool->used;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

SIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Pool* pool = nullptr;
    if (const CUresult rc = PoolArg(handle, &pool); rc != CUDA_SUCCESS) return rc;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* out64 = static_cast<cuuint64_t*>(value);
    switch (attr) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *static_cast<int*>(value) = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out64 = pool->release_threshold; return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out64 = pool->reserved; return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out64 = pool->reserved_high; return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out64 = pool->used; return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *out64 = pool->used_high; return CUDA_SUCCESS;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  });
}
