// Work submission and synchronisation under the compute limit (compute_limit.h). These handlers
// are GATED in cuda_hooks.def: they run only once a compute limit is enabled; otherwise the
// generated forwarder calls the driver directly.
//
// A launch: wait for admission (may sleep), the real launch, then report it. A synchronising call:
// mark the tails of the streams that run dry there first, poll completions afterwards.
#include <cuda.h>

#include "interpose/compute_limit.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"

namespace vgpu::hooks {
namespace {

using compute_limit::LaunchGuard;

// Synchronising call: `before` (which tails to mark: compute_limit.h), the real call,
// AfterSynchronize; traced under VGPU_COMPUTE_TRACE.
template <typename Before, typename Call>
CUresult Synchronizing(Before before, Call call) {
  const int64_t entry = compute_limit::TraceNow();
  before();
  const int64_t call_start = entry != 0 ? compute_limit::TraceNow() : 0;
  const CUresult result = call();
  const int64_t call_end = entry != 0 ? compute_limit::TraceNow() : 0;
  compute_limit::AfterSynchronize();
  if (entry != 0) compute_limit::TraceSync(entry, call_start, call_end);
  return result;
}

CUstream StreamOf(const CUlaunchConfig* config) { return config != nullptr ? config->hStream : nullptr; }

}  // namespace

#define VGPU_REAL_OR_MISSING(sym)                           \
  auto real = RealCudaAs<Pfn_##sym>(kHook_##sym);                 \
  if (real == nullptr) return MissingCudaEntry(kHook_##sym);

CUresult hook_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shared, CUstream hStream,
                             void** kernelParams, void** extra) {
  VGPU_REAL_OR_MISSING(cuLaunchKernel)
  LaunchGuard guard(hStream, /*ptsz=*/false);
  return guard.Finish(real(f, gx, gy, gz, bx, by, bz, shared, hStream, kernelParams, extra));
}

CUresult hook_cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                  CUstream hStream, void** kernelParams, void** extra) {
  VGPU_REAL_OR_MISSING(cuLaunchKernel_ptsz)
  LaunchGuard guard(hStream, /*ptsz=*/true);
  return guard.Finish(real(f, gx, gy, gz, bx, by, bz, shared, hStream, kernelParams, extra));
}

CUresult hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  VGPU_REAL_OR_MISSING(cuLaunchKernelEx)
  LaunchGuard guard(StreamOf(config), /*ptsz=*/false);
  return guard.Finish(real(config, f, kernelParams, extra));
}

CUresult hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                    void** extra) {
  VGPU_REAL_OR_MISSING(cuLaunchKernelEx_ptsz)
  LaunchGuard guard(StreamOf(config), /*ptsz=*/true);
  return guard.Finish(real(config, f, kernelParams, extra));
}

CUresult hook_cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                        CUstream hStream, void** kernelParams) {
  VGPU_REAL_OR_MISSING(cuLaunchCooperativeKernel)
  LaunchGuard guard(hStream, /*ptsz=*/false);
  return guard.Finish(real(f, gx, gy, gz, bx, by, bz, shared, hStream, kernelParams));
}

CUresult hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                             unsigned int bx, unsigned int by, unsigned int bz,
                                             unsigned int shared, CUstream hStream, void** kernelParams) {
  VGPU_REAL_OR_MISSING(cuLaunchCooperativeKernel_ptsz)
  LaunchGuard guard(hStream, /*ptsz=*/true);
  return guard.Finish(real(f, gx, gy, gz, bx, by, bz, shared, hStream, kernelParams));
}

CUresult hook_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  VGPU_REAL_OR_MISSING(cuGraphLaunch)
  LaunchGuard guard(hStream, /*ptsz=*/false, /*starts_after_return=*/false);
  return guard.Finish(real(hGraphExec, hStream));
}

CUresult hook_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  VGPU_REAL_OR_MISSING(cuGraphLaunch_ptsz)
  LaunchGuard guard(hStream, /*ptsz=*/true, /*starts_after_return=*/false);
  return guard.Finish(real(hGraphExec, hStream));
}

CUresult hook_cuStreamSynchronize(CUstream hStream) {
  VGPU_REAL_OR_MISSING(cuStreamSynchronize)
  return Synchronizing([&] { compute_limit::BeforeStreamWait(hStream, /*ptsz=*/false); },
                       [&] { return real(hStream); });
}

CUresult hook_cuStreamSynchronize_ptsz(CUstream hStream) {
  VGPU_REAL_OR_MISSING(cuStreamSynchronize_ptsz)
  return Synchronizing([&] { compute_limit::BeforeStreamWait(hStream, /*ptsz=*/true); },
                       [&] { return real(hStream); });
}

CUresult hook_cuCtxSynchronize() {
  VGPU_REAL_OR_MISSING(cuCtxSynchronize)
  return Synchronizing(compute_limit::BeforeSynchronize, [&] { return real(); });
}

// The limiter marks the streams of the current context (as for cuCtxSynchronize); a context other
// than the current one is synchronised without marks, which only delays its next reading.
CUresult hook_cuCtxSynchronize_v2(CUcontext ctx) {
  VGPU_REAL_OR_MISSING(cuCtxSynchronize_v2)
  return Synchronizing(compute_limit::BeforeSynchronize, [&] { return real(ctx); });
}

CUresult hook_cuEventSynchronize(CUevent hEvent) {
  VGPU_REAL_OR_MISSING(cuEventSynchronize)
  return Synchronizing(compute_limit::BeforeEventWait, [&] { return real(hEvent); });
}

CUresult hook_cuStreamDestroy_v2(CUstream hStream) {
  VGPU_REAL_OR_MISSING(cuStreamDestroy_v2)
  compute_limit::OnStreamDestroyed(hStream);
  return real(hStream);
}

CUresult hook_cuStreamDestroy(CUstream hStream) {  // the ABI before CUDA 4.0
  VGPU_REAL_OR_MISSING(cuStreamDestroy)
  compute_limit::OnStreamDestroyed(hStream);
  return real(hStream);
}

#undef VGPU_REAL_OR_MISSING

}  // namespace vgpu::hooks
