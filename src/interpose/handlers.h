// Hand-written hook handlers (entries marked OWN or GATED in the hook tables).
//
// Each handler has the exact signature of its driver entry and is reached from all three layers
// (exported symbol, dlsym, cuGetProcAddress). Handlers are called with the library state
// possibly not yet loaded; they must call EnsureCudaLoaded()/EnsureNvmlLoaded() before using
// g_real[]. They never throw and never return codes the driver could not return.
#pragma once

#include "interpose/hook_table.h"

namespace vgpu::hooks {

// The handler name is pasted at the first level so cuda.h's version macros cannot rewrite it.
#define VGPU_OWN_OWN(ret, handler, params) ret handler params;
#define VGPU_OWN_PASS(ret, handler, params)
#define VGPU_OWN_GATED(ret, handler, params) ret handler params;
#define VGPU_CUDA_HOOK(kind, sym, params, args) VGPU_OWN_##kind(CUresult, hook_##sym, params)
#define VGPU_NVML_HOOK(kind, sym, params, args) VGPU_OWN_##kind(nvmlReturn_t, hook_##sym, params)
#include "interpose/cuda_hooks.def"
#include "interpose/nvml_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK
#undef VGPU_OWN_OWN
#undef VGPU_OWN_PASS
#undef VGPU_OWN_GATED

}  // namespace vgpu::hooks
