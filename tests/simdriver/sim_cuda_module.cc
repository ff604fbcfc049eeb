// TEST DOUBLE ONLY: modules, libraries and kernel launches of the simulated driver.
//
// Any image is accepted and any function name resolves. A launch occupies the device's single
// execution engine for the kernel's duration (README.md, "Kernel duration"): functions whose name
// starts with "sim_sleep" run for *(const uint64_t*)kernelParams[0] ns, others VGPU_SIM_KERNEL_NS.
#include <cstring>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

constexpr char kSleepPrefix[] = "sim_sleep";

CUresult LoadModule(CUmodule* module_out, const void* image) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (module_out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t bytes = Cfg().module_bytes;
  if (bytes > 0 && !State().TryCharge(ctx->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* module = NewHandle<Module>(HandleType::kModule);
  module->ctx = ctx;
  module->charged = bytes;
  *module_out = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

}  // namespace

void ReleaseModule(const Module* module) {
  if (module->ctx != nullptr && module->charged > 0) State().Uncharge(module->ctx->device, module->charged);
  for (const auto& [name, function] : module->functions) {
    if (function->lazy_charged > 0) State().Uncharge(function->lazy_device, function->lazy_charged);
    Rt().handles.erase(function.get());
  }
}

namespace {

// Frees a module or library and its functions. REQUIRES: Runtime::mu held.
void UnloadModule(Module* module) {
  ReleaseModule(module);
  DeleteHandle(module);
}

Function* FunctionOf(Module* module, const char* name) {
  auto& slot = module->functions[name];
  if (!slot) {
    slot = std::make_unique<Function>();
    slot->name = name;
    slot->sleep = std::strncmp(name, kSleepPrefix, sizeof kSleepPrefix - 1) == 0;
    Rt().handles[slot.get()] = HandleType::kFunction;
  }
  return slot.get();
}

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                CUstream handle, void** params, void** extra, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Function* function = Lookup<Function>(f, HandleType::kFunction);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<uint64_t>(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  // Lazy loading: the first launch brings the function's code onto the device, memory that no
  // allocation call reports (the real driver's CUDA_MODULE_LOADING=LAZY).
  if (function->lazy_charged == 0 && Cfg().lazy_module_bytes > 0) {
    if (!State().TryCharge(stream->ctx->device, Cfg().lazy_module_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    function->lazy_charged = Cfg().lazy_module_bytes;
    function->lazy_device = stream->ctx->device;
  }
  const uint64_t duration = KernelDuration(function, params, extra);
  if (stream->capture != nullptr) return CaptureKernel(stream, duration);
  Enqueue(stream, duration);
  return CUDA_SUCCESS;
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool ptsz) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->hStream, params, extra, ptsz);
}

}  // namespace

uint64_t KernelDuration(const Function* function, void** params, void** extra) {
  if (function == nullptr || !function->sleep) return Cfg().kernel_ns;
  if (params != nullptr && params[0] != nullptr) return *static_cast<const uint64_t*>(params[0]);
  // Packed parameters: CU_LAUNCH_PARAM_BUFFER_POINTER, then the first 8 bytes are the duration.
  const void* buffer = nullptr;
  size_t buffer_size = 0;
  for (void** p = extra; p != nullptr && *p != CU_LAUNCH_PARAM_END; p += 2) {
    if (p[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = p[1];
    if (p[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && p[1] != nullptr) buffer_size = *static_cast<size_t*>(p[1]);
  }
  if (buffer != nullptr && buffer_size >= sizeof(uint64_t)) {
    uint64_t ns = 0;
    std::memcpy(&ns, buffer, sizeof ns);
    return ns;
  }
  return Cfg().kernel_ns;
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return Guarded([&] { return LoadModule(module, fname); });
}
SIM_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return Guarded([&] { return LoadModule(module, image); });
}
SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                       CUjit_option* options, void** optionValues) {
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return LoadModule(module, image); });
}
SIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return Guarded([&] { return LoadModule(module, fatCubin); });
}

SIM_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Module* module = Lookup<Module>(hmod, HandleType::kModule);
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    UnloadModule(module);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Module* module = Lookup<Module>(hmod, HandleType::kModule);
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *hfunc = reinterpret_cast<CUfunction>(FunctionOf(module, name));
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                      void** jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                      unsigned int numLibraryOptions) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    if (numLibraryOptions > 0 && (libraryOptions == nullptr || libraryOptionValues == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto* module = NewHandle<Module>(HandleType::kLibrary);  // context independent, not charged
    *library = reinterpret_cast<CUlibrary>(module);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Module* module = Lookup<Module>(library, HandleType::kLibrary);
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *pKernel = reinterpret_cast<CUkernel>(FunctionOf(module, name));
    return CUDA_SUCCESS;
  });
}

// A CUkernel is accepted wherever a CUfunction is, as with the real driver; here they are the
// same object.
SIM_EXPORT CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  return Guarded([&] {
    Api api;
    Context* ctx = nullptr;
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
    if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (Lookup<Function>(kernel, HandleType::kFunction) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = reinterpret_cast<CUfunction>(kernel);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Module* module = Lookup<Module>(library, HandleType::kLibrary);
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    UnloadModule(module);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int, CUstream s, void** params,
                                   void** extra) {
  return Guarded([&] { return Launch(f, gx, gy, gz, bx, by, bz, s, params, extra, false); });
}
SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int, CUstream s,
                                        void** params, void** extra) {
  return Guarded([&] { return Launch(f, gx, gy, gz, bx, by, bz, s, params, extra, true); });
}
SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return Guarded([&] { return LaunchEx(config, f, params, extra, false); });
}
SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return Guarded([&] { return LaunchEx(config, f, params, extra, true); });
}
SIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int,
                                              CUstream s, void** params) {
  return Guarded([&] { return Launch(f, gx, gy, gz, bx, by, bz, s, params, nullptr, false); });
}
SIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int,
                                                   CUstream s, void** params) {
  return Guarded([&] { return Launch(f, gx, gy, gz, bx, by, bz, s, params, nullptr, true); });
}

// Deprecated launches that the driver still exports. The legacy ones take their block shape and
// parameters from earlier cuFuncSetBlockShape / cuParamSet* calls, which the simulation does not
// model: each runs one kernel of the function's duration (VGPU_SIM_KERNEL_NS unless sim_sleep*).
SIM_EXPORT CUresult cuLaunch(CUfunction f) {
  return Guarded([&] { return Launch(f, 1, 1, 1, 1, 1, 1, nullptr, nullptr, nullptr, false); });
}
SIM_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  if (grid_width <= 0 || grid_height <= 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Launch(f, grid_width, grid_height, 1, 1, 1, 1, nullptr, nullptr, nullptr, false); });
}
SIM_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream s) {
  if (grid_width <= 0 || grid_height <= 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Launch(f, grid_width, grid_height, 1, 1, 1, 1, s, nullptr, nullptr, false); });
}
// One launch per entry, in order; the first failure is returned.
SIM_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices,
                                                         unsigned int) {
  if (launchParamsList == nullptr || numDevices == 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] {
    for (unsigned int i = 0; i < numDevices; ++i) {
      const CUDA_LAUNCH_PARAMS& p = launchParamsList[i];
      const CUresult rc = Launch(p.function, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                                 p.hStream, p.kernelParams, nullptr, false);
      if (rc != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
  });
}
