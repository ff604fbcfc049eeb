// Frees that the driver refuses, and memory that outlives its handle.
//
//   memory_frees unknown     releases of pointers/handles nobody allocated, through every
//                            release entry point; prints "code_<entry> <result>". Run natively
//                            and with vgpu, the transcripts must be identical (the driver's own
//                            error comes back, nothing crashes).
//   memory_frees misuse      a free of an interior pointer, a double free and a free without a
//                            current context (each fails in the driver) must not give budget
//                            back: afterwards 64 MiB allocations until refused. Hold point "full".
//   memory_frees vmm_mapped  cuMemRelease of a handle that is still mapped: the driver keeps the
//                            memory until cuMemUnmap, so it must stay charged until then.
//                            Fills with 64 MiB allocations while it is mapped (hold point
//                            "mapped"), unmaps, and fills again.
#include <cuda.h>

#include <string>
#include <vector>

#include "memory_common.h"

namespace {

using memtest::kMiB;
using memtest::Report;

constexpr uint64_t kChunk = 64 * kMiB;

// 64 MiB allocations until refused; returns them (the caller frees) and reports <key>_count and
// <key>_refusal_code.
std::vector<CUdeviceptr> Fill(const std::string& key) {
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
  return held;
}

void FreeAll(std::vector<CUdeviceptr>* held) {
  for (CUdeviceptr p : *held) CHECK_CU(cuMemFree(p));
  held->clear();
}

int Unknown() {
  memtest::InitPrimaryContext(0);
  const CUdeviceptr bogus = 0x7f00deadb000ull;
  Report("code_cuMemFree_v2", cuMemFree(bogus));
  Report("code_cuMemFreeAsync", cuMemFreeAsync(bogus, nullptr));
  Report("code_cuMemRelease", cuMemRelease(0xdeadbeefull));
  Report("code_cuArrayDestroy", cuArrayDestroy(reinterpret_cast<CUarray>(0x1234)));
  Report("code_cuMipmappedArrayDestroy", cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(0x1234)));
  Report("code_cuMemPoolDestroy", cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(0x1234)));
  Report("code_cuGraphExecDestroy", cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(0x1234)));
  Report("code_cuMemFreeHost", cuMemFreeHost(reinterpret_cast<void*>(0x1234)));
  std::printf("done\n");
  return 0;
}

int Misuse() {
  const CUdevice dev = memtest::InitPrimaryContext(0);
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  (void)dev;
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc(&p, kChunk));
  Report("code_interior_free", cuMemFree(p + 4096));
  CHECK_CU(cuMemFree(p));
  Report("code_double_free", cuMemFree(p));
  CUdeviceptr q = 0;
  CHECK_CU(cuMemAlloc(&q, kChunk));
  CHECK_CU(cuCtxSetCurrent(nullptr));
  Report("code_free_without_context", cuMemFree(q));
  CHECK_CU(cuCtxSetCurrent(ctx));
  std::vector<CUdeviceptr> held = Fill("fill");
  held.push_back(q);  // still allocated: its free failed
  Report("held_bytes", held.size() * kChunk);
  memtest::HoldPoint("full");
  FreeAll(&held);
  Report("info_free_final", memtest::FreeBytes());
  std::printf("done\n");
  return 0;
}

int VmmMapped() {
  const CUdevice dev = memtest::InitPrimaryContext(0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUdeviceptr va = 0;
  CHECK_CU(cuMemAddressReserve(&va, kChunk, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  CHECK_CU(cuMemCreate(&handle, kChunk, &prop, 0));
  CHECK_CU(cuMemMap(va, kChunk, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(va, kChunk, &access, 1));
  CHECK_CU(cuMemRelease(handle));  // the mapping keeps the memory alive

  std::vector<CUdeviceptr> held = Fill("mapped_fill");
  memtest::HoldPoint("mapped");
  FreeAll(&held);
  Report("info_free_mapped", memtest::FreeBytes());
  CHECK_CU(cuMemUnmap(va, kChunk));  // now the driver frees it
  CHECK_CU(cuMemAddressFree(va, kChunk));
  Report("info_free_unmapped", memtest::FreeBytes());
  held = Fill("unmapped_fill");
  FreeAll(&held);
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unknown") return Unknown();
  if (mode == "misuse") return Misuse();
  if (mode == "vmm_mapped") return VmmMapped();
  std::fprintf(stderr, "usage: memory_frees unknown|misuse|vmm_mapped\n");
  return 2;
}
