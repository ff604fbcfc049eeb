// Runtime-style discovery (layers 2 and 3): dlopen("libcuda.so.1"), dlsym(cuGetProcAddress_v2),
// then every entry through cuGetProcAddress, the way the CUDA runtime (11.3+) does it.
//
// Usage: proc_address <expect>   where <expect> is "vgpu" (pointers for hooked entries must be
// vgpu's, and the same wrapper that dlsym returns for the versioned name: pointer identity per
// ABI) or "driver" (no interposition or CUDA_DISABLE_CONTROL: every pointer is the driver's).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "check.h"

namespace {

struct Row {
  const char* base;
  int version;
  unsigned long long flags;
  const char* variant;  // the exported name whose ABI the driver picks for (base, version, flags)
};

constexpr unsigned long long kPtds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

// Versions are the ones in cudaTypedefs.h (PFN_<name>_v<version>[_ptsz]).
const Row kRows[] = {
    {"cuInit", 2000, 0, "cuInit"},
    {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
    {"cuDeviceTotalMem", 2000, 0, "cuDeviceTotalMem"},
    {"cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"},
    {"cuDeviceTotalMem", 13000, 0, "cuDeviceTotalMem_v2"},
    {"cuMemGetInfo", 2000, 0, "cuMemGetInfo"},
    {"cuMemGetInfo", 13000, 0, "cuMemGetInfo_v2"},
    {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 13000, kPtds, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 2000, 0, "cuMemAllocPitch"},
    {"cuMemAllocPitch", 13000, 0, "cuMemAllocPitch_v2"},
    {"cuMemFree", 2000, 0, "cuMemFree"},
    {"cuMemFree", 13000, 0, "cuMemFree_v2"},
    {"cuMemAllocManaged", 13000, 0, "cuMemAllocManaged"},
    {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 13000, kPtds, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 13000, 0, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 11020, kPtds, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFreeAsync", 13000, 0, "cuMemFreeAsync"},
    {"cuMemFreeAsync", 13000, kPtds, "cuMemFreeAsync_ptsz"},
    {"cuMemCreate", 13000, 0, "cuMemCreate"},
    {"cuMemRelease", 13000, 0, "cuMemRelease"},
    {"cuMemMap", 13000, 0, "cuMemMap"},
    {"cuMemUnmap", 13000, 0, "cuMemUnmap"},
    {"cuMemPrefetchAsync", 8000, 0, "cuMemPrefetchAsync"},
    {"cuMemPrefetchAsync", 8000, kPtds, "cuMemPrefetchAsync_ptsz"},
    {"cuMemPrefetchAsync", 13000, 0, "cuMemPrefetchAsync_v2"},
    {"cuMemPrefetchAsync", 13000, kPtds, "cuMemPrefetchAsync_v2_ptsz"},
    {"cuMemPrefetchBatchAsync", 13000, 0, "cuMemPrefetchBatchAsync"},
    {"cuMemPrefetchBatchAsync", 13000, kPtds, "cuMemPrefetchBatchAsync_ptsz"},
    {"cuMemDiscardAndPrefetchBatchAsync", 13000, 0, "cuMemDiscardAndPrefetchBatchAsync"},
    {"cuMemDiscardAndPrefetchBatchAsync", 13000, kPtds, "cuMemDiscardAndPrefetchBatchAsync_ptsz"},
    {"cuMemAdvise", 8000, 0, "cuMemAdvise"},
    {"cuMemAdvise", 13000, 0, "cuMemAdvise_v2"},
    {"cuMemPoolTrimTo", 13000, 0, "cuMemPoolTrimTo"},
    {"cuMemPoolDestroy", 13000, 0, "cuMemPoolDestroy"},
    {"cuGraphInstantiateWithFlags", 13000, 0, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithParams", 13000, 0, "cuGraphInstantiateWithParams"},
    {"cuGraphInstantiateWithParams", 13000, kPtds, "cuGraphInstantiateWithParams_ptsz"},
    {"cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"},
    {"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"},
    {"cuGraphExecDestroy", 13000, 0, "cuGraphExecDestroy"},
    {"cuDevicePrimaryCtxRetain", 13000, 0, "cuDevicePrimaryCtxRetain"},
    {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
    {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
    {"cuModuleLoadData", 13000, 0, "cuModuleLoadData"},
    {"cuArrayCreate", 13000, 0, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 13000, 0, "cuArray3DCreate_v2"},
    {"cuMipmappedArrayCreate", 13000, 0, "cuMipmappedArrayCreate"},
    {"cuArrayCreate", 2000, 0, "cuArrayCreate"},
    {"cuArray3DCreate", 2000, 0, "cuArray3DCreate"},
    {"cuArrayDestroy", 13000, 0, "cuArrayDestroy"},
    {"cuMipmappedArrayDestroy", 13000, 0, "cuMipmappedArrayDestroy"},
    {"cuLaunchKernel", 4000, 0, "cuLaunchKernel"},
    {"cuLaunchKernel", 13000, 0, "cuLaunchKernel"},
    {"cuLaunchKernel", 7000, kPtds, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernel", 13000, kPtds, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 13000, 0, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 13000, kPtds, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 13000, 0, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 13000, kPtds, "cuLaunchCooperativeKernel_ptsz"},
    {"cuLaunchCooperativeKernelMultiDevice", 9000, 0, "cuLaunchCooperativeKernelMultiDevice"},
    {"cuLaunch", 2000, 0, "cuLaunch"},
    {"cuLaunchGrid", 2000, 0, "cuLaunchGrid"},
    {"cuLaunchGridAsync", 2000, 0, "cuLaunchGridAsync"},
    {"cuGraphLaunch", 13000, 0, "cuGraphLaunch"},
    {"cuGraphLaunch", 13000, kPtds, "cuGraphLaunch_ptsz"},
    {"cuStreamSynchronize", 2000, 0, "cuStreamSynchronize"},
    {"cuStreamSynchronize", 13000, 0, "cuStreamSynchronize"},
    {"cuStreamSynchronize", 7000, kPtds, "cuStreamSynchronize_ptsz"},
    {"cuStreamSynchronize", 13000, kPtds, "cuStreamSynchronize_ptsz"},
    {"cuCtxSynchronize", 2000, 0, "cuCtxSynchronize"},
    {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
    {"cuEventSynchronize", 2000, 0, "cuEventSynchronize"},
    {"cuEventSynchronize", 13000, 0, "cuEventSynchronize"},
    {"cuStreamDestroy", 2000, 0, "cuStreamDestroy"},
    {"cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2"},
    {"cuStreamDestroy", 13000, 0, "cuStreamDestroy_v2"},
};

// Every CUDA entry of the hook table; a hook with no row above fails the coverage check.
const char* const kHookedNames[] = {
#define VGPU_CUDA_HOOK(kind, sym, params, args) #sym,
#include "interpose/cuda_hooks.def"
#undef VGPU_CUDA_HOOK
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Which object a function pointer lives in.
std::string ObjectOf(void* p) {
  Dl_info info{};
  CHECK(dladdr(p, &info) != 0 && info.dli_fname != nullptr);
  return info.dli_fname;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  const bool expect_vgpu = std::strcmp(argv[1], "vgpu") == 0;
  CHECK(expect_vgpu || std::strcmp(argv[1], "driver") == 0);
  const char* expected_object = expect_vgpu ? "libvgpu.so" : "libcuda.so.1";

  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(handle != nullptr);
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  CHECK(gpa != nullptr);
  CHECK(EndsWith(ObjectOf(reinterpret_cast<void*>(gpa)), expected_object));

  std::set<std::string> covered;
  for (const Row& row : kRows) {
    void* from_gpa = nullptr;
    CUdriverProcAddressQueryResult status{};
    CHECK_CU(gpa(row.base, &from_gpa, row.version, row.flags, &status));
    CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);
    void* from_dlsym = dlsym(handle, row.variant);
    if (from_gpa != from_dlsym || !EndsWith(ObjectOf(from_gpa), expected_object)) {
      std::fprintf(stderr, "mismatch: cuGetProcAddress(%s, %d, %llu) gave %p in %s; dlsym(%s) gave %p\n",
                   row.base, row.version, row.flags, from_gpa, ObjectOf(from_gpa).c_str(), row.variant,
                   from_dlsym);
      return 1;
    }
    covered.insert(row.variant);
  }
  for (const char* name : kHookedNames) {
    if (covered.count(name) == 0) {
      std::fprintf(stderr, "hook %s has no pointer-identity row in proc_address.cc\n", name);
      return 1;
    }
  }

  // The legacy (CUDA 11.3 ABI) cuGetProcAddress, reached through the new one, maps too.
  void* legacy = nullptr;
  CHECK_CU(gpa("cuGetProcAddress", &legacy, 11030, 0, nullptr));
  CHECK(legacy == dlsym(handle, "cuGetProcAddress"));
  void* alloc_v1 = nullptr;
  CHECK_CU(reinterpret_cast<PFN_cuGetProcAddress_v11030>(legacy)("cuMemAlloc", &alloc_v1, 2000, 0));
  CHECK(alloc_v1 == dlsym(handle, "cuMemAlloc"));

  // Entry points vgpu does not hook come back untouched, from the driver.
  void* get_name = nullptr;
  CHECK_CU(gpa("cuDeviceGetName", &get_name, 13000, 0, nullptr));
  CHECK(EndsWith(ObjectOf(get_name), "libcuda.so.1"));
  // Unknown names: no pointer and SYMBOL_NOT_FOUND, as the driver says (the real 580 driver
  // returns CUDA_SUCCESS with that status; vgpu passes the driver's answer through either way).
  void* unknown = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status{};
  gpa("cuNoSuchFunction", &unknown, 13000, 0, &status);
  CHECK(unknown == nullptr);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  // Work through resolved pointers, as the runtime would.
  void* p = nullptr;
  CHECK_CU(gpa("cuInit", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuInit_v2000>(p)(0));
  CUdevice dev;
  CHECK_CU(gpa("cuDeviceGet", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuDeviceGet_v2000>(p)(&dev, 0));
  CUcontext ctx;
  CHECK_CU(gpa("cuDevicePrimaryCtxRetain", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuDevicePrimaryCtxRetain_v7000>(p)(&ctx, dev));
  CHECK_CU(gpa("cuCtxSetCurrent", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(p)(ctx));
  CUdeviceptr dptr = 0;
  CHECK_CU(gpa("cuMemAlloc", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuMemAlloc_v3020>(p)(&dptr, 1 << 20));
  CHECK_CU(gpa("cuMemFree", &p, 13000, 0, nullptr));
  CHECK_CU(reinterpret_cast<PFN_cuMemFree_v3020>(p)(dptr));
  std::printf("proc_address ok (%zu rows)\n", sizeof(kRows) / sizeof(kRows[0]));
  return 0;
}
