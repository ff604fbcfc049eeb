// The deprecated launches the driver still exports, besides the current ones (handlers_launch.cc).
// GATED like the others: they run only while a compute limit is enabled.
//
// cuLaunch and cuLaunchGrid run on the legacy default stream (stream 0, never the per-thread one:
// they have no _ptsz variant). cuLaunchCooperativeKernelMultiDevice launches one kernel per entry,
// each on its own stream and device: every entry is admitted by the limiter of its stream's
// device (that stream's context is made current while it waits), and all of them must be admitted
// before the driver launches any, as the launches must start together.
#include <cuda.h>

#include <memory>
#include <vector>

#include "interpose/compute_limit.h"
#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"

namespace vgpu::hooks {

using compute_limit::LaunchGuard;

CUresult hook_cuLaunch(CUfunction f) {
  auto real = RealCudaAs<Pfn_cuLaunch>(kHook_cuLaunch);
  if (real == nullptr) return MissingCudaEntry(kHook_cuLaunch);
  LaunchGuard guard(nullptr, /*ptsz=*/false);
  return guard.Finish(real(f));
}

CUresult hook_cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  auto real = RealCudaAs<Pfn_cuLaunchGrid>(kHook_cuLaunchGrid);
  if (real == nullptr) return MissingCudaEntry(kHook_cuLaunchGrid);
  LaunchGuard guard(nullptr, /*ptsz=*/false);
  return guard.Finish(real(f, grid_width, grid_height));
}

CUresult hook_cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  auto real = RealCudaAs<Pfn_cuLaunchGridAsync>(kHook_cuLaunchGridAsync);
  if (real == nullptr) return MissingCudaEntry(kHook_cuLaunchGridAsync);
  LaunchGuard guard(hStream, /*ptsz=*/false);
  return guard.Finish(real(f, grid_width, grid_height, hStream));
}

CUresult hook_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices,
                                                   unsigned int flags) {
  auto real = RealCudaAs<Pfn_cuLaunchCooperativeKernelMultiDevice>(kHook_cuLaunchCooperativeKernelMultiDevice);
  if (real == nullptr) return MissingCudaEntry(kHook_cuLaunchCooperativeKernelMultiDevice);
  if (launchParamsList == nullptr || numDevices == 0) return real(launchParamsList, numDevices, flags);
  std::vector<std::unique_ptr<LaunchGuard>> guards;
  guards.reserve(numDevices);
  for (unsigned int i = 0; i < numDevices; ++i) {
    const CUstream stream = launchParamsList[i].hStream;
    CUcontext stream_ctx = nullptr;
    CUcontext current = nullptr;
    // A stream of another context: wait with that context current, so that the entry is admitted
    // by its own device's limiter. (The driver refuses the launch itself if the stream is bad.)
    const bool switch_context = stream != nullptr && g_cuda.cuStreamGetCtx != nullptr &&
                                g_cuda.cuCtxGetCurrent != nullptr && g_cuda.cuCtxSetCurrent != nullptr &&
                                g_cuda.cuStreamGetCtx(stream, &stream_ctx) == CUDA_SUCCESS &&
                                g_cuda.cuCtxGetCurrent(&current) == CUDA_SUCCESS && stream_ctx != current &&
                                g_cuda.cuCtxSetCurrent(stream_ctx) == CUDA_SUCCESS;
    guards.push_back(std::make_unique<LaunchGuard>(stream, /*ptsz=*/false, /*starts_after_return=*/false));
    if (switch_context) g_cuda.cuCtxSetCurrent(current);
  }
  const CUresult result = real(launchParamsList, numDevices, flags);
  for (auto& guard : guards) guard->Finish(result);
  return result;
}

}  // namespace vgpu::hooks
