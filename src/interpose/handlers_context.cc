// Context creation and module loading allocate device memory the application never asked for
// (the context's own memory, kernel images). A context is charged before it exists: the size
// the container's earlier contexts measured is reserved first (refused with
// CUDA_ERROR_OUT_OF_MEMORY when it does not fit), the context is created, NVML measures it, and
// the measurement replaces the reservation; a context that still takes the container past its
// limit is destroyed again and refused. After a module load the overhead is reconciled.
#include <cuda.h>

#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"

namespace vgpu::hooks {
namespace {

// Whether creating or retaining a context on `dev` can allocate memory: a retain of a primary
// context that is already active cannot.
bool PrimaryCreatesMemory(CUdevice dev) {
  unsigned int flags = 0;
  int active = 0;
  if (g_cuda.cuDevicePrimaryCtxGetState == nullptr || g_cuda.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS) {
    return true;
  }
  return active == 0;
}

// Runs `create` under a context charge; `undo` destroys what it created when it does not fit.
template <typename Create, typename Undo>
CUresult ChargedContext(CUdevice dev, bool new_memory, Create create, Undo undo) {
  if (!memory::Enabled()) return create();
  memory::ContextCharge charge;
  if (!memory::ReserveContext(static_cast<int>(dev), new_memory, &charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = create();
  if (!memory::FinishContext(charge, result == CUDA_SUCCESS)) {
    undo();
    memory::Reconcile(charge.device);  // its memory is gone again
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return result;
}

}  // namespace

CUresult hook_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuDevicePrimaryCtxRetain>(RealCuda(kHook_cuDevicePrimaryCtxRetain));
  if (real == nullptr) return MissingCudaEntry(kHook_cuDevicePrimaryCtxRetain);
  if (!memory::Enabled()) return real(pctx, dev);
  return ChargedContext(
      dev, PrimaryCreatesMemory(dev), [&] { return real(pctx, dev); },
      [&] {
        if (g_cuda.cuDevicePrimaryCtxRelease_v2 != nullptr) g_cuda.cuDevicePrimaryCtxRelease_v2(dev);
      });
}

namespace {

// The cuCtxCreate family: every call makes a new context (518 MiB more on an H200, also the
// second one of a process).
template <typename Create>
CUresult CreateContext(CUcontext* pctx, CUdevice dev, Create create) {
  return ChargedContext(dev, true, create, [&] {
    if (pctx != nullptr && *pctx != nullptr && g_cuda.cuCtxDestroy_v2 != nullptr) g_cuda.cuCtxDestroy_v2(*pctx);
  });
}

}  // namespace

CUresult hook_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v2>(RealCuda(kHook_cuCtxCreate_v2));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v2);
  return CreateContext(pctx, dev, [&] { return real(pctx, flags, dev); });
}

CUresult hook_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                             CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v3>(RealCuda(kHook_cuCtxCreate_v3));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v3);
  return CreateContext(pctx, dev, [&] { return real(pctx, paramsArray, numParams, flags, dev); });
}

CUresult hook_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v4>(RealCuda(kHook_cuCtxCreate_v4));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v4);
  return CreateContext(pctx, dev, [&] { return real(pctx, ctxCreateParams, flags, dev); });
}

CUresult hook_cuModuleLoadData(CUmodule* module, const void* image) {
  auto real = reinterpret_cast<Pfn_cuModuleLoadData>(RealCuda(kHook_cuModuleLoadData));
  if (real == nullptr) return MissingCudaEntry(kHook_cuModuleLoadData);
  const CUresult result = real(module, image);
  if (result == CUDA_SUCCESS && memory::Enabled()) memory::Reconcile(memory::CurrentDevice());
  return result;
}

}  // namespace vgpu::hooks
