// Stream-ordered allocation pools (cuMemAllocAsync, cuMemAllocFromPoolAsync).
//
// A pool holds device memory in reserve beyond its live blocks, and that reserve is what the
// driver (and NVML) counts. So vgpu charges each pool its *reserved* memory
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not the blocks: before an allocation it reserves the
// block size (the most the pool can need to grow for it, rounded to 2 MiB, plus the largest extra
// growth the pool has shown) unless a range its reserve is known to hold free fits the block
// (pool_free_ranges.h), and after it sets the pool's charge to what the pool really reserves.
// Frees and synchronisations shrink the reserve later; the charge follows at the pool's next
// allocation, at cuMemPoolTrimTo, and whenever a reservation is refused (RefreshAllPools), so an
// over-charge never outlives the next need.
//
// Allocations made while their stream is being captured are not memory yet (they become graph
// allocation nodes, charged when the graph is instantiated) and pass through uncharged.
#pragma once

#include <cuda.h>

namespace vgpu::memory {

// Sets `pool`'s charge to its current reserved memory (no-op for pools vgpu has not seen).
void RefreshPool(CUmemoryPool pool);
// A block of `bytes` went back to `pool` (cuMemFreeAsync, cuMemFree): the reserve now holds that
// range free. The charge is not read here (RefreshPool does that).
void PoolBlockFreed(CUmemoryPool pool, CUdeviceptr block, uint64_t bytes);
// Refreshes every known pool; returns true if any charge went down.
bool RefreshAllPools();
// What a stream-ordered allocation on ledger device `device` reserves beyond its own size: the
// largest extra growth a pool of this process has shown there (a pool's first block also brings
// the driver's own pool memory). The free figure leaves it out, so a stream-ordered allocation of
// what is reported free fits.
uint64_t PoolReserveAhead(int device);

}  // namespace vgpu::memory
