#include "interpose/loader.h"

#include <dlfcn.h>
#include <pthread.h>

#include "common/log.h"
#include "interpose/driver_imports.h"
#include "interpose/runtime.h"

namespace vgpu {
namespace {

// Set while this thread is inside a library load; see loader.h for why.
__attribute__((tls_model("initial-exec"))) thread_local bool t_loading = false;

pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
void* g_cuda_handle = nullptr;
void* g_nvml_handle = nullptr;

constexpr const char* kCudaLibrary = "libcuda.so.1";
constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

void* OpenLibrary(const char* soname) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    VGPU_ERROR("cannot load %s: %s", soname, why != nullptr ? why : "unknown error");
  }
  return handle;
}

// Loads one driver library and resolves its hooked entries and imports, then publishes `state`.
void LoadLibrary(const char* soname, const char* what, DriverLibrary library, void (*resolve_imports)(void*),
                 void** handle, std::atomic<int>* state) {
  GetRuntime();  // configuration and log level first, so loading is logged at the right level
  *handle = OpenLibrary(soname);
  if (*handle == nullptr) {
    state->store(kUnavailable, std::memory_order_release);
    return;
  }
  ResolveRealEntries(library, *handle);
  resolve_imports(*handle);
  VGPU_INFO("loaded %s %s", what, soname);
  state->store(kLoaded, std::memory_order_release);
}

void LoadCuda() {
  LoadLibrary(kCudaLibrary, "the CUDA driver", DriverLibrary::kCuda, ResolveCudaImports, &g_cuda_handle,
              &g_cuda_state);
}

void LoadNvml() {
  LoadLibrary(kNvmlLibrary, "NVML", DriverLibrary::kNvml, ResolveNvmlImports, &g_nvml_handle, &g_nvml_state);
}

bool EnsureLoaded(pthread_once_t* once, void (*load)(), const std::atomic<int>& state) {
  if (t_loading) return false;  // re-entered from inside a load on this thread
  t_loading = true;
  pthread_once(once, load);
  t_loading = false;
  return state.load(std::memory_order_acquire) == kLoaded;
}

}  // namespace

bool EnsureCudaLoadedSlow() { return EnsureLoaded(&g_cuda_once, LoadCuda, g_cuda_state); }
bool EnsureNvmlLoadedSlow() { return EnsureLoaded(&g_nvml_once, LoadNvml, g_nvml_state); }

void* CudaHandle() { return EnsureCudaLoaded() ? g_cuda_handle : nullptr; }
void* NvmlHandle() { return EnsureNvmlLoaded() ? g_nvml_handle : nullptr; }

CUresult MissingCudaEntry(HookId id) {
  if (g_cuda_state.load(std::memory_order_acquire) != kLoaded) {
    VGPU_ERROR("%s called but the CUDA driver (%s) is not available", kHookEntries[id].name,
               kCudaLibrary);
    return CUDA_ERROR_NO_DEVICE;
  }
  VGPU_ERROR("%s called but the CUDA driver does not export it", kHookEntries[id].name);
  return CUDA_ERROR_NOT_FOUND;
}

nvmlReturn_t MissingNvmlEntry(HookId id) {
  if (g_nvml_state.load(std::memory_order_acquire) != kLoaded) {
    VGPU_ERROR("%s called but NVML (%s) is not available", kHookEntries[id].name, kNvmlLibrary);
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  VGPU_ERROR("%s called but NVML does not export it", kHookEntries[id].name);
  return NVML_ERROR_FUNCTION_NOT_FOUND;
}

DlsymFn RealDlsym() {
  static std::atomic<DlsymFn> cached{nullptr};
  DlsymFn fn = cached.load(std::memory_order_acquire);
  if (__builtin_expect(fn != nullptr, 1)) return fn;
  // dlsym moved into libc.so.6 at glibc 2.34; older versions carry the original node.
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  for (const char* version : kVersions) {
    fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (fn != nullptr) break;
  }
  cached.store(fn, std::memory_order_release);
  return fn;
}

}  // namespace vgpu
