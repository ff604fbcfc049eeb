// Memory the driver adds on its own, and whether the free figure stays what can be allocated.
// Run against the simulated driver with VGPU_SIM_LAZY_MODULE_MEMORY set (each function's first
// launch charges that much: lazy module loading, no allocation call).
//
//   memory_growth free <kernels>   allocations of sizes that are not multiples of 2 MiB (some
//                                  freed again), a memory query, then the first launches of
//                                  <kernels> functions (growth), then: "free" (cuMemGetInfo),
//                                  "fit_code" of one allocation of free - 2 MiB (hold point "fit"
//                                  while it is held), "over_code" of free + 64 MiB afterwards.
//   memory_growth fill <kernels>   2 MiB allocations until refused (hold point "full"), then the
//                                  first launches of <kernels> functions while full ("launch_code"
//                                  each; hold point "grown").
//   memory_growth odd <mib>        allocations of <mib> MiB + 1 byte until refused ("count");
//                                  hold point "full".
#include <cuda.h>

#include <string>
#include <vector>

#include "memory_common.h"

namespace {

using memtest::kMiB;
using memtest::Report;

CUresult AllocCode(uint64_t bytes, std::vector<CUdeviceptr>* keep) {
  CUdeviceptr p = 0;
  const CUresult rc = cuMemAlloc(&p, bytes);
  if (rc == CUDA_SUCCESS) keep->push_back(p);
  return rc;
}

// The first launch of `count` distinct functions of a freshly loaded module.
void LaunchNew(int count, bool report) {
  CUmodule module;
  static const char kImage[] = "simulated module image";
  CHECK_CU(cuModuleLoadData(&module, kImage));
  for (int i = 0; i < count; ++i) {
    CUfunction f;
    const std::string name = "growth_kernel_" + std::to_string(i);
    CHECK_CU(cuModuleGetFunction(&f, module, name.c_str()));
    const CUresult rc = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
    if (report) Report("launch_code", rc);
  }
  CHECK_CU(cuCtxSynchronize());
}

int Free(int kernels) {
  memtest::InitPrimaryContext(0);
  std::vector<CUdeviceptr> keep;
  const uint64_t sizes[] = {37 * kMiB + 12345, 3 * kMiB + 1, 100 * kMiB + 7, 1536 * 1024, 64 * 1024, 21 * kMiB + 999};
  for (uint64_t size : sizes) CHECK_CU(static_cast<CUresult>(AllocCode(size, &keep)));
  CHECK_CU(cuMemFree(keep[1]));
  CHECK_CU(cuMemFree(keep[4]));
  memtest::FreeBytes();  // a query (and the library's reading of the driver) before the growth
  LaunchNew(kernels, false);
  const uint64_t free_bytes = memtest::FreeBytes();
  Report("free", free_bytes);
  std::vector<CUdeviceptr> fit;
  Report("fit_code", free_bytes > 2 * kMiB ? AllocCode(free_bytes - 2 * kMiB, &fit) : CUDA_SUCCESS);
  memtest::HoldPoint("fit");
  for (CUdeviceptr p : fit) CHECK_CU(cuMemFree(p));
  std::vector<CUdeviceptr> over;
  Report("over_code", AllocCode(memtest::FreeBytes() + 64 * kMiB, &over));
  for (CUdeviceptr p : over) CHECK_CU(cuMemFree(p));
  return 0;
}

int Fill(int kernels) {
  memtest::InitPrimaryContext(0);
  std::vector<CUdeviceptr> keep;
  int steps = 0;
  while (steps++ < memtest::kMaxSteps && AllocCode(2 * kMiB, &keep) == CUDA_SUCCESS) {
  }
  Report("filled", keep.size() * 2 * kMiB);
  memtest::HoldPoint("full");
  LaunchNew(kernels, true);
  memtest::HoldPoint("grown");
  return 0;
}

int Odd(uint64_t mib) {
  memtest::InitPrimaryContext(0);
  std::vector<CUdeviceptr> keep;
  int steps = 0;
  while (steps++ < memtest::kMaxSteps && AllocCode(mib * kMiB + 1, &keep) == CUDA_SUCCESS) {
  }
  Report("count", keep.size());
  memtest::HoldPoint("full");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "free" && argc == 3) return Free(static_cast<int>(memtest::ArgU64(argv[2])));
  if (mode == "fill" && argc == 3) return Fill(static_cast<int>(memtest::ArgU64(argv[2])));
  if (mode == "odd" && argc == 3) return Odd(memtest::ArgU64(argv[2]));
  std::fprintf(stderr, "usage: see the comment at the top of memory_growth.cc\n");
  return 2;
}
