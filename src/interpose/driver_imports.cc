#include "interpose/driver_imports.h"

#include "interpose/loader.h"

namespace vgpu {

CudaImports g_cuda;
NvmlImports g_nvml;

void ResolveCudaImports(void* handle) {
  DlsymFn real_dlsym = RealDlsym();
#define VGPU_CUDA_IMPORT(sym, ret, params) \
  g_cuda.sym = reinterpret_cast<ret(*) params>(real_dlsym(handle, #sym));
#define VGPU_NVML_IMPORT(sym, params)
#include "interpose/driver_imports.def"
#undef VGPU_CUDA_IMPORT
#undef VGPU_NVML_IMPORT
}

void ResolveNvmlImports(void* handle) {
  DlsymFn real_dlsym = RealDlsym();
#define VGPU_CUDA_IMPORT(sym, ret, params)
#define VGPU_NVML_IMPORT(sym, params) \
  g_nvml.sym = reinterpret_cast<nvmlReturn_t(*) params>(real_dlsym(handle, #sym));
#include "interpose/driver_imports.def"
#undef VGPU_CUDA_IMPORT
#undef VGPU_NVML_IMPORT
}

}  // namespace vgpu
