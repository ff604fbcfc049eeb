// Context creation and module loading allocate device memory the application never asked for
// (the context's own memory, kernel images). After each, this process's overhead on that device
// is reconciled with NVML's per-process usage, so the limit counts what the driver counts.
#include <cuda.h>

#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"

namespace vgpu::hooks {
namespace {

CUresult AfterContext(CUresult result, CUdevice dev) {
  if (result == CUDA_SUCCESS && memory::Enabled()) {
    memory::Reconcile(memory::DeviceForOrdinal(static_cast<int>(dev)), /*after_context=*/true);
  }
  return result;
}

}  // namespace

CUresult hook_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuDevicePrimaryCtxRetain>(RealCuda(kHook_cuDevicePrimaryCtxRetain));
  if (real == nullptr) return MissingCudaEntry(kHook_cuDevicePrimaryCtxRetain);
  return AfterContext(real(pctx, dev), dev);
}

CUresult hook_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v2>(RealCuda(kHook_cuCtxCreate_v2));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v2);
  return AfterContext(real(pctx, flags, dev), dev);
}

CUresult hook_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                             CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v3>(RealCuda(kHook_cuCtxCreate_v3));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v3);
  return AfterContext(real(pctx, paramsArray, numParams, flags, dev), dev);
}

CUresult hook_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  auto real = reinterpret_cast<Pfn_cuCtxCreate_v4>(RealCuda(kHook_cuCtxCreate_v4));
  if (real == nullptr) return MissingCudaEntry(kHook_cuCtxCreate_v4);
  return AfterContext(real(pctx, ctxCreateParams, flags, dev), dev);
}

CUresult hook_cuModuleLoadData(CUmodule* module, const void* image) {
  auto real = reinterpret_cast<Pfn_cuModuleLoadData>(RealCuda(kHook_cuModuleLoadData));
  if (real == nullptr) return MissingCudaEntry(kHook_cuModuleLoadData);
  const CUresult result = real(module, image);
  if (result == CUDA_SUCCESS && memory::Enabled()) memory::Reconcile(memory::CurrentDevice());
  return result;
}

}  // namespace vgpu::hooks
