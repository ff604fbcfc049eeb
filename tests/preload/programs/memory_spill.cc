// Memory oversubscription: allocations beyond the device limit spill into host memory.
//
//   memory_spill fill <path> <chunk_mib> <total_mib> [<sync_dir>]
//       allocates <chunk_mib> blocks through <path> (alloc: cuMemAlloc_v2, managed:
//       cuMemAllocManaged, async: cuMemAllocAsync on a stream, pitch: cuMemAllocPitch_v2) until
//       <total_mib> are held or a call fails, and classifies each block by what the driver says
//       about it: "device" (not managed, or managed without advice), "spilled" (managed, preferred
//       location the host, accessed by the device). Reports round1_device, round1_spilled,
//       round1_misplaced (managed memory advised otherwise), round1_code (0 = the total was
//       reached, else the refusal), info_total / info_free (cuMemGetInfo) when full, then stops
//       at hold point "full" (and, with <sync_dir>, touches <sync_dir>/full and waits for
//       <sync_dir>/go). Frees everything (async: cuMemFreeAsync, then the stream synchronised),
//       reports info_free_freed, stops at hold point "freed" (with <sync_dir>: touches freed,
//       waits for go2), then does it all once more (round2_*) and frees again.
//   memory_spill leak <chunk_mib> <total_mib>
//       allocates like "fill alloc" and exits without freeing anything.
//   memory_spill share <dir> <nprocs> <chunk_mib>
//       N copies: context, barrier, cuMemAlloc_v2 blocks until refused, barrier, hold point
//       "full", frees. Reports device, spilled and refusal_code.
//   memory_spill prefetch
//       fills 1 GiB with 64 MiB cuMemAlloc_v2 blocks, then asks the driver to bring the last
//       (spilled) block onto device 0 every way it can: cuMemPrefetchAsync(_v2) to the device,
//       cuMemAdvise(_v2) preferred location = device, read-mostly, unset preferred location
//       (v1 entries through dlsym). Reports code_<call> for each, then spilled_preferred and
//       spilled_last_prefetch (cuMemRangeGetAttribute), hold point "prefetched"; a prefetch to
//       the host (host_prefetch_code, host_last_prefetch); then, with room made on the device,
//       the application's own managed memory prefetched to the device (own_prefetch_code,
//       own_last_prefetch).
//   memory_spill batch
//       fills 1 GiB like "prefetch", frees the first device block and allocates 32 MiB of its own
//       managed memory, then on a stream of its own: cuMemPrefetchBatchAsync of {last spilled
//       block -> device 0, own -> device 0, second-to-last spilled block -> host} (code_batch_mixed,
//       then mixed_spilled_last, mixed_own_last, mixed_host_last: last prefetch locations);
//       cuMemDiscardAndPrefetchBatchAsync through cuGetProcAddress with per-thread-stream flags
//       (the _ptsz entry) of spilled memory only (one range starts 1 MiB before the first spilled
//       block, in whatever lies there), to device 0
//       (code_batch_discard_ptsz, discard_spilled_last); hold point "batched"; a malformed batch
//       (malformed_code: the driver's answer) and a batch of nothing but host prefetches
//       (host_batch_code, host_batch_last).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "memory_common.h"

namespace {

using memtest::ArgU64;
using memtest::kMiB;
using memtest::Report;

struct Block {
  CUdeviceptr ptr = 0;
  bool managed = false;
};

struct Held {
  std::vector<Block> blocks;
  CUresult code = CUDA_SUCCESS;
};

enum class Path { kAlloc, kManaged, kAsync, kPitch };

Path ParsePath(const std::string& name) {
  if (name == "alloc") return Path::kAlloc;
  if (name == "managed") return Path::kManaged;
  if (name == "async") return Path::kAsync;
  if (name == "pitch") return Path::kPitch;
  std::fprintf(stderr, "unknown path %s\n", name.c_str());
  std::exit(2);
}

CUresult AllocateOne(Path path, uint64_t bytes, CUstream stream, CUdeviceptr* p) {
  switch (path) {
    case Path::kAlloc: return cuMemAlloc(p, bytes);
    case Path::kManaged: return cuMemAllocManaged(p, bytes, CU_MEM_ATTACH_GLOBAL);
    case Path::kAsync: return cuMemAllocAsync(p, bytes, stream);
    case Path::kPitch: {
      size_t pitch = 0;
      return cuMemAllocPitch(p, &pitch, 64 * 1024, bytes / (64 * 1024), 4);
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

Held Fill(Path path, uint64_t chunk, uint64_t total, CUstream stream) {
  Held held;
  for (uint64_t have = 0; have + chunk <= total; have += chunk) {
    Block block;
    held.code = AllocateOne(path, chunk, stream, &block.ptr);
    if (held.code != CUDA_SUCCESS) break;
    unsigned int managed = 0;
    CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, block.ptr));
    block.managed = managed != 0;
    held.blocks.push_back(block);
  }
  if (path == Path::kAsync) CHECK_CU(cuStreamSynchronize(stream));
  return held;
}

// "spilled": preferred on the host and mapped by device 0; "misplaced": managed memory that is
// neither plain (no advice) nor placed like that.
void Classify(const Held& held, const std::string& round) {
  uint64_t device = 0, spilled = 0, misplaced = 0;
  for (const Block& block : held.blocks) {
    if (!block.managed) {
      ++device;
      continue;
    }
    int preferred = 0;
    CHECK_CU(cuMemRangeGetAttribute(&preferred, sizeof(preferred), CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                    block.ptr, 1));
    int accessed_by[4] = {};
    CHECK_CU(cuMemRangeGetAttribute(accessed_by, sizeof(accessed_by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
                                    block.ptr, 1));
    if (preferred == CU_DEVICE_CPU && accessed_by[0] == 0 && accessed_by[1] == CU_DEVICE_INVALID) {
      ++spilled;
    } else if (preferred == CU_DEVICE_INVALID && accessed_by[0] == CU_DEVICE_INVALID) {
      ++device;  // the application's own managed memory, on the device
    } else {
      ++misplaced;
    }
  }
  Report((round + "_device").c_str(), device);
  Report((round + "_spilled").c_str(), spilled);
  Report((round + "_misplaced").c_str(), misplaced);
  Report((round + "_code").c_str(), held.code);
}

void FreeAll(Path path, Held* held, CUstream stream) {
  for (const Block& block : held->blocks) {
    if (path == Path::kAsync) {
      CHECK_CU(cuMemFreeAsync(block.ptr, stream));
    } else {
      CHECK_CU(cuMemFree(block.ptr));
    }
  }
  if (path == Path::kAsync) CHECK_CU(cuStreamSynchronize(stream));
  held->blocks.clear();
}

void Sync(const char* dir, const char* reached, const char* go) {
  if (dir == nullptr) return;
  memtest::TouchFile(std::string(dir) + "/" + reached);
  const int64_t deadline = memtest::NowNs() + 20'000'000'000;
  while (!memtest::FileExists(std::string(dir) + "/" + go)) {
    CHECK(memtest::NowNs() < deadline);
    memtest::SleepMs(1);
  }
}

int FillMode(Path path, uint64_t chunk, uint64_t total, const char* sync_dir) {
  memtest::InitPrimaryContext(0);
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
  Report("info_free_initial", free_bytes);
  for (const char* round : {"round1", "round2"}) {
    Held held = Fill(path, chunk, total, stream);
    Classify(held, round);
    CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
    Report((std::string(round) + "_info_total").c_str(), total_bytes);
    Report((std::string(round) + "_info_free").c_str(), free_bytes);
    const bool first = std::string(round) == "round1";
    if (first) {
      memtest::HoldPoint("full");
      Sync(sync_dir, "full", "go");
    }
    FreeAll(path, &held, stream);
    CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
    Report((std::string(round) + "_info_free_freed").c_str(), free_bytes);
    if (first) {
      memtest::HoldPoint("freed");
      Sync(sync_dir, "freed", "go2");
    }
  }
  CHECK_CU(cuStreamDestroy(stream));
  std::printf("done\n");
  return 0;
}

int LeakMode(uint64_t chunk, uint64_t total) {
  memtest::InitPrimaryContext(0);
  const Held held = Fill(Path::kAlloc, chunk, total, nullptr);
  Classify(held, "leak");
  return 0;  // nothing freed
}

int ShareMode(const std::string& dir, int nprocs, uint64_t chunk) {
  memtest::InitPrimaryContext(0);
  memtest::Barrier(dir, "spill-start-", nprocs);
  const Held held = Fill(Path::kAlloc, chunk, uint64_t{memtest::kMaxSteps} * chunk, nullptr);
  Classify(held, "share");
  memtest::Barrier(dir, "spill-filled-", nprocs);
  memtest::HoldPoint("full");
  memtest::Barrier(dir, "spill-held-", nprocs);
  for (const Block& block : held.blocks) CHECK_CU(cuMemFree(block.ptr));
  return 0;
}

int LastPrefetch(CUdeviceptr ptr) {
  int location = 0;
  CHECK_CU(cuMemRangeGetAttribute(&location, sizeof(location), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, ptr, 1));
  return location;
}

int PrefetchMode() {
  memtest::InitPrimaryContext(0);
  Held held = Fill(Path::kAlloc, 64 * kMiB, 1024 * kMiB, nullptr);
  Classify(held, "prefetch");
  CHECK(!held.blocks.empty() && held.blocks.back().managed);
  const CUdeviceptr spilled = held.blocks.back().ptr;
  const size_t size = 64 * kMiB;
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = 0;
  CUmemLocation host{};
  host.type = CU_MEM_LOCATION_TYPE_HOST;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib != nullptr);
  auto advise_v1 = reinterpret_cast<PFN_cuMemAdvise_v8000>(dlsym(lib, "cuMemAdvise"));
  auto prefetch_v1 = reinterpret_cast<PFN_cuMemPrefetchAsync_v8000>(dlsym(lib, "cuMemPrefetchAsync"));
  CHECK(advise_v1 != nullptr && prefetch_v1 != nullptr);
  Report("code_prefetch_v2_device", cuMemPrefetchAsync(spilled, size, device, 0, nullptr));
  Report("code_prefetch_v1_device", prefetch_v1(spilled + kMiB, kMiB, 0, nullptr));
  Report("code_advise_v2_preferred_device", cuMemAdvise(spilled, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device));
  Report("code_advise_v1_preferred_device", advise_v1(spilled, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
  Report("code_advise_v2_read_mostly", cuMemAdvise(spilled, size, CU_MEM_ADVISE_SET_READ_MOSTLY, device));
  Report("code_advise_v2_unset_preferred", cuMemAdvise(spilled, size, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, device));
  CHECK_CU(cuStreamSynchronize(nullptr));
  int preferred = 0;
  CHECK_CU(cuMemRangeGetAttribute(&preferred, sizeof(preferred), CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, spilled, 1));
  Report("spilled_preferred", static_cast<uint64_t>(static_cast<int64_t>(preferred)));
  Report("spilled_last_prefetch", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(spilled))));
  memtest::HoldPoint("prefetched");
  // A range that straddles a device block and the spilled one is kept on the host too.
  Report("code_prefetch_straddling", cuMemPrefetchAsync(spilled - kMiB, 2 * kMiB, device, 0, nullptr));
  // Towards the host: the driver gets it.
  Report("host_prefetch_code", cuMemPrefetchAsync(spilled, size, host, 0, nullptr));
  Report("host_last_prefetch", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(spilled))));
  // Memory that did not spill is the application's business.
  CHECK_CU(cuMemFree(held.blocks.front().ptr));
  CUdeviceptr own = 0;
  CHECK_CU(cuMemAllocManaged(&own, 32 * kMiB, CU_MEM_ATTACH_HOST));
  Report("own_prefetch_code", cuMemPrefetchAsync(own, 32 * kMiB, device, 0, nullptr));
  Report("own_last_prefetch", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(own))));
  CHECK_CU(cuMemFree(own));
  for (size_t i = 1; i < held.blocks.size(); ++i) CHECK_CU(cuMemFree(held.blocks[i].ptr));
  std::printf("done\n");
  return 0;
}

int BatchMode() {
  memtest::InitPrimaryContext(0);
  Held held = Fill(Path::kAlloc, 64 * kMiB, 1024 * kMiB, nullptr);
  Classify(held, "batch");
  CHECK(held.blocks.size() >= 3 && held.blocks.back().managed && held.blocks[held.blocks.size() - 2].managed);
  CHECK(!held.blocks.front().managed);
  const CUdeviceptr last = held.blocks.back().ptr;
  const CUdeviceptr second_last = held.blocks[held.blocks.size() - 2].ptr;
  CUdeviceptr first_spilled = 0;
  for (const Block& block : held.blocks) {
    if (block.managed && first_spilled == 0) first_spilled = block.ptr;
  }
  CHECK_CU(cuMemFree(held.blocks.front().ptr));
  CUdeviceptr own = 0;
  CHECK_CU(cuMemAllocManaged(&own, 32 * kMiB, CU_MEM_ATTACH_HOST));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = 0;
  CUmemLocation host{};
  host.type = CU_MEM_LOCATION_TYPE_HOST;

  // Two operations to the device (one spilled, one not), one to the host.
  {
    CUdeviceptr dptrs[] = {last, own, second_last};
    size_t sizes[] = {64 * kMiB, 32 * kMiB, 64 * kMiB};
    CUmemLocation locations[] = {device, host};
    size_t first_op[] = {0, 2};
    Report("code_batch_mixed", cuMemPrefetchBatchAsync(dptrs, sizes, 3, locations, first_op, 2, 0, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    Report("mixed_spilled_last", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(last))));
    Report("mixed_own_last", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(own))));
    Report("mixed_host_last", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(second_last))));
  }
  // Nothing but spilled memory to the device, through the runtime's way of finding entries.
  {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != nullptr);
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
    CHECK(gpa != nullptr);
    void* entry = nullptr;
    CUdriverProcAddressQueryResult found{};
    CHECK_CU(gpa("cuMemDiscardAndPrefetchBatchAsync", &entry, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    CHECK(entry != nullptr && found == CU_GET_PROC_ADDRESS_SUCCESS);
    auto discard = reinterpret_cast<PFN_cuMemDiscardAndPrefetchBatchAsync_v13000_ptsz>(entry);
    CUdeviceptr dptrs[] = {last, first_spilled - kMiB};
    size_t sizes[] = {64 * kMiB, 2 * kMiB};
    CUmemLocation locations[] = {device};
    size_t first_op[] = {0};
    Report("code_batch_discard_ptsz", discard(dptrs, sizes, 2, locations, first_op, 1, 0, nullptr));
    CHECK_CU(cuStreamSynchronize(nullptr));
    Report("discard_spilled_last", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(last))));
  }
  memtest::HoldPoint("batched");
  // A batch the driver refuses reaches it unchanged (its first location index must be 0).
  {
    CUdeviceptr dptrs[] = {last, own};
    size_t sizes[] = {64 * kMiB, 32 * kMiB};
    CUmemLocation locations[] = {device};
    size_t first_op[] = {1};
    Report("malformed_code", cuMemPrefetchBatchAsync(dptrs, sizes, 2, locations, first_op, 1, 0, stream));
  }
  // Towards the host: the driver gets it.
  {
    CUdeviceptr dptrs[] = {last};
    size_t sizes[] = {64 * kMiB};
    CUmemLocation locations[] = {host};
    size_t first_op[] = {0};
    Report("host_batch_code", cuMemPrefetchBatchAsync(dptrs, sizes, 1, locations, first_op, 1, 0, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    Report("host_batch_last", static_cast<uint64_t>(static_cast<int64_t>(LastPrefetch(last))));
  }
  CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuMemFree(own));
  for (size_t i = 1; i < held.blocks.size(); ++i) CHECK_CU(cuMemFree(held.blocks[i].ptr));
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fill" && (argc == 5 || argc == 6)) {
    return FillMode(ParsePath(argv[2]), ArgU64(argv[3]) * kMiB, ArgU64(argv[4]) * kMiB, argc == 6 ? argv[5] : nullptr);
  }
  if (mode == "leak" && argc == 4) return LeakMode(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB);
  if (mode == "share" && argc == 5) return ShareMode(argv[2], static_cast<int>(ArgU64(argv[3])), ArgU64(argv[4]) * kMiB);
  if (mode == "prefetch" && argc == 2) return PrefetchMode();
  if (mode == "batch" && argc == 2) return BatchMode();
  std::fprintf(stderr,
               "usage: memory_spill fill <alloc|managed|async|pitch> <chunk_mib> <total_mib> [<sync_dir>]\n"
               "       memory_spill leak <chunk_mib> <total_mib>\n"
               "       memory_spill share <dir> <nprocs> <chunk_mib>\n"
               "       memory_spill prefetch\n"
               "       memory_spill batch\n");
  return 2;
}
