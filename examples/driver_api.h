// The driver entry points the example and the benchmarks use, discovered the way the CUDA
// runtime discovers them: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then one
// cuGetProcAddress_v2 call per entry. No link-time dependency on libcuda.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>

struct DriverApi {
  void* handle = nullptr;
  bool simulated = false;  // the loaded libcuda.so.1 is vgpu's test double
  PFN_cuGetProcAddress_v12000 GetProcAddress = nullptr;
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuInit_v2000 Init = nullptr;
  PFN_cuDriverGetVersion_v2020 DriverGetVersion = nullptr;
  PFN_cuDeviceGet_v2000 DeviceGet = nullptr;
  PFN_cuDeviceGetName_v2000 DeviceGetName = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain = nullptr;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize = nullptr;
  PFN_cuMemGetInfo_v3020 MemGetInfo = nullptr;
  PFN_cuMemAlloc_v3020 MemAlloc = nullptr;
  PFN_cuMemFree_v3020 MemFree = nullptr;
  PFN_cuModuleLoadData_v2000 ModuleLoadData = nullptr;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction = nullptr;
  PFN_cuLaunchKernel_v4000 LaunchKernel = nullptr;
  PFN_cuStreamCreate_v2000 StreamCreate = nullptr;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize = nullptr;
  PFN_cuEventCreate_v2000 EventCreate = nullptr;
  PFN_cuEventRecord_v2000 EventRecord = nullptr;
  PFN_cuEventSynchronize_v2000 EventSynchronize = nullptr;
  PFN_cuEventElapsedTime_v2000 EventElapsedTime = nullptr;

  // Loads the driver and every entry above. On failure prints why to stderr and returns false.
  bool Load() {
    handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      std::fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror());
      return false;
    }
    simulated = dlsym(handle, "vgpu_sim_marker") != nullptr;
    GetProcAddress = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
    if (GetProcAddress == nullptr) {
      std::fprintf(stderr, "libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)\n");
      return false;
    }
    return Get("cuGetErrorName", 6000, &GetErrorName) && Get("cuInit", 2000, &Init) &&
           Get("cuDriverGetVersion", 2020, &DriverGetVersion) && Get("cuDeviceGet", 2000, &DeviceGet) &&
           Get("cuDeviceGetName", 2000, &DeviceGetName) &&
           Get("cuDevicePrimaryCtxRetain", 7000, &DevicePrimaryCtxRetain) &&
           Get("cuCtxSetCurrent", 4000, &CtxSetCurrent) && Get("cuCtxSynchronize", 2000, &CtxSynchronize) &&
           Get("cuMemGetInfo", 3020, &MemGetInfo) && Get("cuMemAlloc", 3020, &MemAlloc) &&
           Get("cuMemFree", 3020, &MemFree) && Get("cuModuleLoadData", 2000, &ModuleLoadData) &&
           Get("cuModuleGetFunction", 2000, &ModuleGetFunction) && Get("cuLaunchKernel", 4000, &LaunchKernel) &&
           Get("cuStreamCreate", 2000, &StreamCreate) && Get("cuStreamSynchronize", 2000, &StreamSynchronize) &&
           Get("cuEventCreate", 2000, &EventCreate) && Get("cuEventRecord", 2000, &EventRecord) &&
           Get("cuEventSynchronize", 2000, &EventSynchronize) &&
           Get("cuEventElapsedTime", 2000, &EventElapsedTime);
  }

  const char* ErrorName(CUresult r) const {
    const char* name = nullptr;
    if (GetErrorName == nullptr || GetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "?";
    return name;
  }

 private:
  template <typename Fn>
  bool Get(const char* name, int version, Fn* out) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (GetProcAddress(name, &p, version, 0, &status) != CUDA_SUCCESS || p == nullptr) {
      std::fprintf(stderr, "cuGetProcAddress(%s) failed\n", name);
      return false;
    }
    *out = reinterpret_cast<Fn>(p);
    return true;
  }
};

// Exits with a message naming the call when a driver call fails.
#define DRV_CHECK(api, expr)                                                                   \
  do {                                                                                         \
    CUresult drv_check_result_ = (expr);                                                       \
    if (drv_check_result_ != CUDA_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                \
                   (api).ErrorName(drv_check_result_));                                        \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
