// Real driver / NVML entry points that vgpu calls for its own bookkeeping (not interposed).
// Filled by the loader before it publishes the library as loaded; read-only afterwards.
#pragma once

#include <cuda.h>

// From CUDA 12.8 on, cuda.h maps cuEventElapsedTime to cuEventElapsedTime_v2; the imports name
// both versions (driver_imports.def).
#undef cuEventElapsedTime

#include "interpose/nvml_types.h"

namespace vgpu {

struct CudaImports {
#define VGPU_CUDA_IMPORT(sym, ret, params) ret(*sym) params = nullptr;
#define VGPU_NVML_IMPORT(sym, params)
#include "interpose/driver_imports.def"
#undef VGPU_CUDA_IMPORT
#undef VGPU_NVML_IMPORT
};

struct NvmlImports {
#define VGPU_CUDA_IMPORT(sym, ret, params)
#define VGPU_NVML_IMPORT(sym, params) nvmlReturn_t(*sym) params = nullptr;
#include "interpose/driver_imports.def"
#undef VGPU_CUDA_IMPORT
#undef VGPU_NVML_IMPORT
};

// Valid once EnsureCudaLoaded() / EnsureNvmlLoaded() returned true.
extern CudaImports g_cuda;
extern NvmlImports g_nvml;

void ResolveCudaImports(void* handle);
void ResolveNvmlImports(void* handle);

}  // namespace vgpu
