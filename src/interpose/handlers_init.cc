// Handlers for initialisation and entry-point discovery: cuInit, nvmlInit*, cuGetProcAddress*.
#include <cuda.h>

#include <string>

#include "common/log.h"
#include "interpose/compute_limit.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"
#include "interpose/registration.h"
#include "interpose/runtime.h"

namespace vgpu::hooks {
namespace {

// Layer 3: replace a pointer the real cuGetProcAddress returned by the wrapper of the same ABI.
// Identity, not names: whatever versioned variant the driver chose for (symbol, cudaVersion,
// flags) is the one whose wrapper we hand back. Unknown pointers pass through untouched.
void SubstituteProcAddress(void** pfn, const char* symbol, int cuda_version, cuuint64_t flags) {
  if (pfn == nullptr || *pfn == nullptr || GetRuntime().passthrough()) return;
  HookId id;
  void* thunk = ThunkForRealPointer(*pfn, &id);
  if (thunk == nullptr) return;
  *pfn = thunk;
  if (LogEnabled(LogLevel::kDebug)) {
    char detail[160];
    snprintf(detail, sizeof(detail), "(\"%s\", cudaVersion %d, flags %llu)", symbol, cuda_version,
             static_cast<unsigned long long>(flags));
    NoteLayerSlow(id, Layer::kProcAddress, detail);
  }
}

}  // namespace

CUresult hook_cuInit(unsigned int flags) {
  const Runtime& runtime = GetRuntime();
  auto real = reinterpret_cast<Pfn_cuInit>(RealCuda(kHook_cuInit));
  if (real == nullptr) return MissingCudaEntry(kHook_cuInit);
  if (!runtime.passthrough() && !runtime.config_ok) {
    VGPU_ERROR("cuInit refused: the vgpu configuration is invalid (see the errors above)");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  std::string error;
  if (!runtime.passthrough() && !registration::RegisterAtInit(&error)) {
    VGPU_ERROR("cuInit refused: %s", error.c_str());
    return CUDA_ERROR_NOT_PERMITTED;
  }
  const CUresult result = real(flags);
  if (result != CUDA_SUCCESS) return result;
  // Limits that cannot be enforced (a corrupt ledger, say) refuse CUDA rather than run unlimited.
  if (!memory::InitForCuInit(&error)) {
    VGPU_ERROR("cuInit refused: memory limits are configured but cannot be enforced: %s", error.c_str());
    return CUDA_ERROR_NOT_PERMITTED;
  }
  compute_limit::InitForCuInit();
  return result;
}

CUresult hook_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  auto real = reinterpret_cast<Pfn_cuGetProcAddress>(RealCuda(kHook_cuGetProcAddress));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGetProcAddress);
  const CUresult result = real(symbol, pfn, cudaVersion, flags);
  if (result == CUDA_SUCCESS) SubstituteProcAddress(pfn, symbol, cudaVersion, flags);
  return result;
}

CUresult hook_cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* symbolStatus) {
  auto real = reinterpret_cast<Pfn_cuGetProcAddress_v2>(RealCuda(kHook_cuGetProcAddress_v2));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGetProcAddress_v2);
  const CUresult result = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (result == CUDA_SUCCESS) SubstituteProcAddress(pfn, symbol, cudaVersion, flags);
  return result;
}

namespace {

// As cuInit: an invalid configuration or a refused registration (registration.h) refuses NVML.
nvmlReturn_t CheckNvmlInitAllowed() {
  const Runtime& runtime = GetRuntime();
  if (runtime.passthrough()) return NVML_SUCCESS;
  if (!runtime.config_ok) {
    VGPU_ERROR("nvmlInit refused: the vgpu configuration is invalid (see the errors above)");
    return NVML_ERROR_NO_PERMISSION;
  }
  std::string error;
  if (!registration::RegisterAtInit(&error)) {
    VGPU_ERROR("nvmlInit refused: %s", error.c_str());
    return NVML_ERROR_NO_PERMISSION;
  }
  return NVML_SUCCESS;
}

}  // namespace

nvmlReturn_t hook_nvmlInit_v2() {
  auto real = reinterpret_cast<Pfn_nvmlInit_v2>(RealNvml(kHook_nvmlInit_v2));
  if (real == nullptr) return MissingNvmlEntry(kHook_nvmlInit_v2);
  const nvmlReturn_t allowed = CheckNvmlInitAllowed();
  return allowed != NVML_SUCCESS ? allowed : real();
}

nvmlReturn_t hook_nvmlInit() {
  auto real = reinterpret_cast<Pfn_nvmlInit>(RealNvml(kHook_nvmlInit));
  if (real == nullptr) return MissingNvmlEntry(kHook_nvmlInit);
  const nvmlReturn_t allowed = CheckNvmlInitAllowed();
  return allowed != NVML_SUCCESS ? allowed : real();
}

nvmlReturn_t hook_nvmlInitWithFlags(unsigned int flags) {
  auto real = reinterpret_cast<Pfn_nvmlInitWithFlags>(RealNvml(kHook_nvmlInitWithFlags));
  if (real == nullptr) return MissingNvmlEntry(kHook_nvmlInitWithFlags);
  const nvmlReturn_t allowed = CheckNvmlInitAllowed();
  return allowed != NVML_SUCCESS ? allowed : real(flags);
}

}  // namespace vgpu::hooks
