#include "interpose/memory_pools.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "common/log.h"
#include "interpose/allocation_map.h"
#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"
#include "interpose/memory_spill.h"
#include "interpose/pool_free_ranges.h"

namespace vgpu::memory {
namespace {

constexpr uint64_t kPoolGranularity = 2ULL << 20;

struct PoolCharge {
  int device = -1;
  uint64_t charged = 0;        // what the ledger holds for this pool's reserve
  uint64_t learned_extra = 0;  // largest growth seen beyond a block's 2 MiB-rounded size
  PoolFreeRanges free_ranges;  // freed blocks the reserve still holds (pool_free_ranges.h)
};

// Pools are few and their allocations already cost a driver round trip: one mutex for all.
std::mutex g_pools_mu;
std::unordered_map<CUmemoryPool, PoolCharge>* g_pools = nullptr;  // guarded by g_pools_mu; never freed

std::unordered_map<CUmemoryPool, PoolCharge>& Pools() {
  if (g_pools == nullptr) g_pools = new std::unordered_map<CUmemoryPool, PoolCharge>();
  return *g_pools;
}

// The pool's reserved memory as the driver reports it.
bool Reserved(CUmemoryPool pool, uint64_t* out) {
  cuuint64_t value = 0;
  if (g_cuda.cuMemPoolGetAttribute == nullptr ||
      g_cuda.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS) {
    return false;
  }
  *out = value;
  return true;
}

// Set while this thread holds g_pools_mu, so a refusal inside an allocation can refresh the
// pools without locking them twice.
thread_local bool t_holding_pools = false;

// Moves a pool's charge down to `target`, or up if the limit allows; growth the limit does not
// allow stays uncharged here and reaches the ledger through NVML reconciliation (the memory
// exists; new reservations are then refused). REQUIRES: g_pools_mu held.
void SetCharge(PoolCharge& charge, uint64_t target) {
  if (target < charge.charged) {
    Release(charge.device, charge.charged - target);
    charge.charged = target;
  } else if (target > charge.charged && Reserve(charge.device, target - charge.charged)) {
    charge.charged = target;
  }
}

// Follows the pool's reserve as the driver reports it: down always, up only when `up` (never
// from inside a refused reservation: raising the charge reserves, whose refusal refreshes the
// pools again). A reserve below the charge means the pool released memory, and which of its free
// ranges went is unknown: they are forgotten. Returns true if the charge went down.
// REQUIRES: g_pools_mu held.
bool Follow(CUmemoryPool pool, PoolCharge& charge, bool up = true) {
  uint64_t reserved = 0;
  if (!Reserved(pool, &reserved)) return false;
  const bool shrank = reserved < charge.charged;
  if (shrank) charge.free_ranges.Clear();
  if (shrank || up) SetCharge(charge, reserved);
  return shrank;
}

// REQUIRES: g_pools_mu held.
bool RefreshAllPoolsLocked() {
  bool shrank = false;
  for (auto& [pool, charge] : Pools()) shrank |= Follow(pool, charge, /*up=*/false);
  return shrank;
}

struct PoolsLock {
  std::lock_guard<std::mutex> lock{g_pools_mu};
  PoolsLock() { t_holding_pools = true; }
  ~PoolsLock() { t_holding_pools = false; }
};

bool Capturing(CUstream stream, bool per_thread) {
  auto is_capturing = per_thread ? g_cuda.cuStreamIsCapturing_ptsz : g_cuda.cuStreamIsCapturing;
  if (is_capturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// The most a pool can grow for a block: nothing when a range its reserve is known to hold fits
// the block, else the block rounded to 2 MiB plus the largest extra growth this pool has shown.
// The unused reserve as a total is no guide: fragmented, it can exceed the block many times and
// still grow for it (an H200's default pool after PyTorch's cudaMallocAsync backend ran 60
// random blocks: 320 MiB unused, the largest free piece 44 MiB).
uint64_t Headroom(const PoolCharge& charge, size_t bytesize) {
  if (bytesize <= charge.free_ranges.Largest()) return 0;
  return (bytesize + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity + charge.learned_extra;
}

// The pool grew past what the limit allows: give the block back, return the pool's unused
// reserve to the driver, and let the charge follow. REQUIRES: g_pools_mu held.
void UndoGrowth(CUmemoryPool pool, PoolCharge& charge, CUdeviceptr block, CUstream stream) {
  if (g_cuda.cuMemFreeAsync != nullptr) g_cuda.cuMemFreeAsync(block, stream);
  if (g_cuda.cuStreamSynchronize != nullptr) g_cuda.cuStreamSynchronize(stream);
  if (g_cuda.cuMemPoolTrimTo != nullptr) g_cuda.cuMemPoolTrimTo(pool, 0);
  Follow(pool, charge);
}

// The allocation protocol shared by every stream-ordered entry: reserve the most the pool can
// grow for this block, allocate, then turn that headroom into the pool's real growth.
template <typename Allocate>
CUresult AllocateFromPool(CUmemoryPool pool, int device, CUdeviceptr* dptr, size_t bytesize, Allocate allocate,
                          CUstream stream) {
  PoolsLock lock;
  PoolCharge& charge = Pools()[pool];
  if (charge.device < 0) charge.device = device;
  Follow(pool, charge);
  const uint64_t headroom = Headroom(charge, bytesize);
  if (!ReserveUnseen(charge.device, headroom)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = allocate();
  uint64_t after = charge.charged;
  Reserved(pool, &after);
  const uint64_t growth = after > charge.charged ? after - charge.charged : 0;
  const uint64_t rounded = (bytesize + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
  if (growth > rounded && growth - rounded > charge.learned_extra) {
    VGPU_DEBUG("pool %p grew by %llu bytes for a block of %zu", static_cast<void*>(pool),
               static_cast<unsigned long long>(growth), bytesize);
    charge.learned_extra = growth - rounded;
  }
  bool covered = true;
  if (growth <= headroom) {
    Release(charge.device, headroom - growth);
    charge.charged += growth;
  } else if (ReserveIntoHeadroom(charge.device, growth - headroom)) {
    // The pool grew past the block (its own granularity, or the driver's pool memory): that is
    // memory the driver added beyond the request, what the headroom is kept for.
    charge.charged += growth;
  } else {
    charge.charged += headroom;
    covered = false;
  }
  NoteInflight(charge.device, -static_cast<int64_t>(headroom));
  if (after < charge.charged) SetCharge(charge, after);
  if (result != CUDA_SUCCESS) return result;
  if (!covered) {
    UndoGrowth(pool, charge, *dptr, stream);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  charge.free_ranges.Take(*dptr, bytesize);
  Track(KeySpace::kPointer, static_cast<uint64_t>(*dptr),
        AllocRecord{charge.device, AllocKind::kPoolBlock, bytesize, reinterpret_cast<uint64_t>(pool)});
  return result;
}

CUresult AllocAsync(HookId id, bool per_thread, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool explicit_pool,
                    CUstream stream) {
  void* real = RealCuda(id);
  if (real == nullptr) return MissingCudaEntry(id);
  auto call = [&]() -> CUresult {
    if (explicit_pool != nullptr) {
      return reinterpret_cast<Pfn_cuMemAllocFromPoolAsync>(real)(dptr, bytesize, explicit_pool, stream);
    }
    return reinterpret_cast<Pfn_cuMemAllocAsync>(real)(dptr, bytesize, stream);
  };
  if (!Enabled() || dptr == nullptr || Capturing(stream, per_thread)) return call();
  const int device = CurrentDevice();
  if (device < 0) return call();
  CUmemoryPool pool = explicit_pool;
  CUdevice ordinal;
  if (pool == nullptr && (g_cuda.cuCtxGetDevice(&ordinal) != CUDA_SUCCESS || g_cuda.cuDeviceGetMemPool == nullptr ||
                          g_cuda.cuDeviceGetMemPool(&pool, ordinal) != CUDA_SUCCESS)) {
    return call();
  }
  MaybeReconcile(device);
  const CUresult result = AllocateFromPool(pool, device, dptr, bytesize, call, stream);
  if (result != CUDA_ERROR_OUT_OF_MEMORY || bytesize == 0 || !SpillAllowed(device)) return result;
  // Oversubscription: managed memory is usable at once, which satisfies stream order; its free
  // (FreeAsync) waits for the stream before returning it.
  const CUresult spilled = SpillAllocate(device, bytesize, dptr);
  if (spilled == CUDA_SUCCESS) {
    Track(KeySpace::kPointer, static_cast<uint64_t>(*dptr), AllocRecord{device, AllocKind::kSpilled, bytesize, 0});
  }
  return spilled;
}

}  // namespace

void RefreshPool(CUmemoryPool pool) {
  PoolsLock lock;
  auto it = Pools().find(pool);
  if (it != Pools().end()) Follow(pool, it->second);
}

void PoolBlockFreed(CUmemoryPool pool, CUdeviceptr block, uint64_t bytes) {
  PoolsLock lock;
  auto it = Pools().find(pool);
  if (it != Pools().end()) it->second.free_ranges.Add(block, bytes);
}

bool RefreshAllPools() {
  if (t_holding_pools) return RefreshAllPoolsLocked();
  PoolsLock lock;
  return RefreshAllPoolsLocked();
}

uint64_t PoolReserveAhead(int device) {
  auto largest = [device] {
    uint64_t extra = 0;
    for (const auto& [pool, charge] : Pools()) {
      if (charge.device == device) extra = std::max(extra, charge.learned_extra);
    }
    return extra;
  };
  if (t_holding_pools) return largest();
  PoolsLock lock;
  return largest();
}

}  // namespace vgpu::memory

namespace vgpu::hooks {

CUresult hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return memory::AllocAsync(kHook_cuMemAllocAsync, false, dptr, bytesize, nullptr, hStream);
}
CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return memory::AllocAsync(kHook_cuMemAllocAsync_ptsz, true, dptr, bytesize, nullptr, hStream);
}
CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return memory::AllocAsync(kHook_cuMemAllocFromPoolAsync, false, dptr, bytesize, pool, hStream);
}
CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return memory::AllocAsync(kHook_cuMemAllocFromPoolAsync_ptsz, true, dptr, bytesize, pool, hStream);
}

namespace {

// A spilled block (managed memory standing in for a pool block) is freed once the work queued
// before the free on its stream is done: synchronize, then cuMemFree. A capturing stream cannot
// be synchronized: the driver gets the call and answers it.
CUresult FreeSpilledAsync(CUresult (*real)(CUdeviceptr, CUstream), bool per_thread, const memory::AllocRecord& record,
                          CUdeviceptr dptr, CUstream stream) {
  auto free = RealCudaAs<Pfn_cuMemFree_v2>(kHook_cuMemFree_v2);
  const CUstream target = (per_thread && stream == nullptr) ? CU_STREAM_PER_THREAD : stream;
  CUresult result;
  if (memory::Capturing(stream, per_thread) || free == nullptr || g_cuda.cuStreamSynchronize == nullptr) {
    result = real(dptr, stream);
  } else {
    result = g_cuda.cuStreamSynchronize(target);
    if (result == CUDA_SUCCESS) result = free(dptr);
  }
  if (result == CUDA_SUCCESS) {
    memory::ReleaseSpill(record.device, dptr, record.bytes);
  } else {
    memory::Track(memory::KeySpace::kPointer, dptr, record);
  }
  return result;
}

CUresult FreeAsync(HookId id, bool per_thread, CUdeviceptr dptr, CUstream stream) {
  auto real = reinterpret_cast<Pfn_cuMemFreeAsync>(RealCuda(id));
  if (real == nullptr) return MissingCudaEntry(id);
  if (!memory::Enabled()) return real(dptr, stream);
  // The block returns to its pool; the pool's reserve (the charge) changes only when the pool
  // releases memory, which the next refresh observes.
  std::optional<memory::AllocRecord> record = memory::Take(memory::KeySpace::kPointer, dptr);
  if (record && record->kind == memory::AllocKind::kSpilled) return FreeSpilledAsync(real, per_thread, *record, dptr, stream);
  const CUresult result = real(dptr, stream);
  if (record && result != CUDA_SUCCESS) memory::Track(memory::KeySpace::kPointer, dptr, *record);
  if (record && result == CUDA_SUCCESS) {
    if (record->kind == memory::AllocKind::kPoolBlock) {
      memory::PoolBlockFreed(reinterpret_cast<CUmemoryPool>(record->aux), dptr, record->bytes);
    } else {
      memory::Release(record->device, record->bytes);  // cuMemFreeAsync of a cuMemAlloc pointer
    }
  }
  return result;
}

}  // namespace

CUresult hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(kHook_cuMemFreeAsync, false, dptr, hStream);
}
CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(kHook_cuMemFreeAsync_ptsz, true, dptr, hStream);
}

CUresult hook_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  auto real = reinterpret_cast<Pfn_cuMemPoolTrimTo>(RealCuda(kHook_cuMemPoolTrimTo));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPoolTrimTo);
  const CUresult result = real(pool, minBytesToKeep);
  if (memory::Enabled() && result == CUDA_SUCCESS) memory::RefreshPool(pool);
  return result;
}

CUresult hook_cuMemPoolDestroy(CUmemoryPool pool) {
  auto real = reinterpret_cast<Pfn_cuMemPoolDestroy>(RealCuda(kHook_cuMemPoolDestroy));
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemPoolDestroy);
  const CUresult result = real(pool);
  if (memory::Enabled() && result == CUDA_SUCCESS) {
    memory::PoolsLock lock;
    auto it = memory::Pools().find(pool);
    if (it != memory::Pools().end()) {
      memory::Release(it->second.device, it->second.charged);
      memory::Pools().erase(it);
    }
  }
  return result;
}

}  // namespace vgpu::hooks
