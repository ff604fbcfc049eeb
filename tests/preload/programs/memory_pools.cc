// Stream-ordered pools: what counts is the pool's reservation, not its live blocks.
//
//   memory_pools custom    a pool of our own with release threshold UINT64_MAX:
//     1. fill from the pool (64 MiB blocks) until refused; free every block and synchronize:
//        the pool keeps its reservation, so a plain 64 MiB cuMemAlloc must be refused;
//     2. refill from the pool as many blocks as in 1: served from the reservation, so none may
//        be refused (hold point "refill"); free them;
//     3. cuMemPoolTrimTo(pool, 0): the reservation goes back; plain allocations until refused;
//     4. fill the pool again, free the blocks (reservation kept), destroy the pool: plain
//        allocations until refused;
//     5. a new pool filled until refused, destroyed with its blocks outstanding: plain
//        allocations until refused.
//   memory_pools default   steps 1 to 3 with the device's default pool (cuMemAllocAsync),
//                          threshold restored to 0 at the end.
//   memory_pools fragmented  the default pool (threshold UINT64_MAX) filled with blocks of 24 MiB
//     until free is below 96 MiB, every other one freed, and a trim: the unused reserve is in
//     holes of 24 MiB that no trim can release. Then free is read and one block of (free - 2 MiB) is allocated (hold
//     point "fit"), freed and trimmed away, free read again, and one of (free + 64 MiB) tried:
//     the unused reserve exceeds both, no hole holds either, so the pool must grow for them.
// Reports "<step>_…" counts, refusal codes, reservations and free figures.
#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "memory_common.h"

namespace {

using memtest::kMiB;
using memtest::Report;

constexpr uint64_t kChunk = 64 * kMiB;

uint64_t PoolAttr(CUmemoryPool pool, CUmemPool_attribute attribute) {
  cuuint64_t value = 0;
  CHECK_CU(cuMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

struct PoolUser {
  CUmemoryPool pool = nullptr;
  CUstream stream = nullptr;
  bool use_default = false;
  std::vector<CUdeviceptr> blocks;

  CUresult AllocOne() {
    CUdeviceptr p = 0;
    const CUresult rc = use_default ? cuMemAllocAsync(&p, kChunk, stream)
                                    : cuMemAllocFromPoolAsync(&p, kChunk, pool, stream);
    if (rc == CUDA_SUCCESS) blocks.push_back(p);
    return rc;
  }
  // Allocates until refused or `limit` blocks; reports <key>_count and <key>_refusal_code.
  void Fill(const std::string& key, int limit = memtest::kMaxSteps) {
    CUresult rc = CUDA_SUCCESS;
    int n = 0;
    for (; n < limit; ++n) {
      rc = AllocOne();
      if (rc != CUDA_SUCCESS) break;
    }
    Report((key + "_count").c_str(), n);
    Report((key + "_refusal_code").c_str(), rc);
    Report((key + "_reserved").c_str(), Reserved());
  }
  void FreeBlocks() {
    for (CUdeviceptr p : blocks) CHECK_CU(cuMemFreeAsync(p, stream));
    blocks.clear();
    CHECK_CU(cuStreamSynchronize(stream));
  }
  uint64_t Reserved() const { return PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT); }
  void SetThreshold(uint64_t bytes) {
    cuuint64_t value = bytes;
    CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value));
  }
};

CUmemoryPool CreatePool(CUdevice dev) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = nullptr;
  CHECK_CU(cuMemPoolCreate(&pool, &props));
  return pool;
}

// Plain 64 MiB allocations until refused, freed again; reports <key>_count and _refusal_code.
void PlainFill(const std::string& key) {
  std::vector<CUdeviceptr> held;
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUdeviceptr p = 0;
    rc = cuMemAlloc(&p, kChunk);
    if (rc != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  Report((key + "_count").c_str(), held.size());
  Report((key + "_refusal_code").c_str(), rc);
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree(p));
}

int Run(bool use_default) {
  const CUdevice dev = memtest::InitPrimaryContext(0);
  Report("free_initial", memtest::FreeBytes());
  PoolUser user;
  user.use_default = use_default;
  CHECK_CU(cuStreamCreate(&user.stream, CU_STREAM_NON_BLOCKING));
  if (use_default) {
    CHECK_CU(cuDeviceGetDefaultMemPool(&user.pool, dev));
  } else {
    user.pool = CreatePool(dev);
  }
  user.SetThreshold(UINT64_MAX);

  // 1.
  user.Fill("fill");
  const int filled = static_cast<int>(user.blocks.size());
  user.FreeBlocks();
  Report("reserved_after_free", user.Reserved());
  Report("free_after_pool_free", memtest::FreeBytes());
  {
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAlloc(&p, kChunk);
    Report("plain_while_reserved_code", rc);
    if (rc == CUDA_SUCCESS) CHECK_CU(cuMemFree(p));
  }
  // 2.
  user.Fill("refill", filled);
  memtest::HoldPoint("refill");
  user.FreeBlocks();
  // 3.
  CHECK_CU(cuMemPoolTrimTo(user.pool, 0));
  Report("reserved_after_trim", user.Reserved());
  Report("free_after_trim", memtest::FreeBytes());
  PlainFill("after_trim");

  if (use_default) {
    user.SetThreshold(0);
    CHECK_CU(cuMemPoolTrimTo(user.pool, 0));
  } else {
    // 4.
    user.Fill("destroy_fill");
    user.FreeBlocks();
    CHECK_CU(cuMemPoolDestroy(user.pool));
    Report("free_after_destroy", memtest::FreeBytes());
    PlainFill("after_destroy");
    // 5.
    user.pool = CreatePool(dev);
    user.Fill("outstanding_fill");
    user.blocks.clear();  // destroyed with the pool
    CHECK_CU(cuMemPoolDestroy(user.pool));
    Report("free_after_destroy_outstanding", memtest::FreeBytes());
    PlainFill("after_destroy_outstanding");
  }
  CHECK_CU(cuStreamDestroy(user.stream));
  Report("free_final", memtest::FreeBytes());
  std::printf("done\n");
  return 0;
}

int Fragmented() {
  const CUdevice dev = memtest::InitPrimaryContext(0);
  PoolUser user;
  user.use_default = true;
  CHECK_CU(cuStreamCreate(&user.stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuDeviceGetDefaultMemPool(&user.pool, dev));
  user.SetThreshold(UINT64_MAX);
  std::vector<CUdeviceptr> kept;
  while (memtest::FreeBytes() > 96 * kMiB && kept.size() < 100) {  // pairs: one kept, one freed
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAllocAsync(&p, 24 * kMiB, user.stream));
    kept.push_back(p);
    CHECK_CU(cuMemAllocAsync(&p, 24 * kMiB, user.stream));
    user.blocks.push_back(p);
  }
  user.FreeBlocks();
  CHECK_CU(cuMemPoolTrimTo(user.pool, 0));
  Report("reserved", user.Reserved());
  Report("used", PoolAttr(user.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  // What free_check.py does on the GPU (tests/gpu/memory): the fit, then the refusal.
  const uint64_t free = memtest::FreeBytes();
  Report("free", free);
  CUdeviceptr p = 0;
  CUresult rc = free > 2 * kMiB ? cuMemAllocAsync(&p, free - 2 * kMiB, user.stream) : CUDA_SUCCESS;
  Report("fit_code", rc);
  memtest::HoldPoint("fit");
  if (rc == CUDA_SUCCESS && p != 0) user.blocks.push_back(p);
  user.FreeBlocks();
  CHECK_CU(cuMemPoolTrimTo(user.pool, 0));
  const uint64_t free_again = memtest::FreeBytes();
  Report("free_again", free_again);
  p = 0;
  rc = cuMemAllocAsync(&p, free_again + 64 * kMiB, user.stream);
  Report("refused_code", rc);
  if (rc == CUDA_SUCCESS) user.blocks.push_back(p);
  user.blocks.insert(user.blocks.end(), kept.begin(), kept.end());
  user.FreeBlocks();
  user.SetThreshold(0);
  CHECK_CU(cuMemPoolTrimTo(user.pool, 0));
  CHECK_CU(cuStreamDestroy(user.stream));
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "custom") return Run(false);
  if (mode == "default") return Run(true);
  if (mode == "fragmented") return Fragmented();
  std::fprintf(stderr, "usage: memory_pools custom|default|fragmented\n");
  return 2;
}
