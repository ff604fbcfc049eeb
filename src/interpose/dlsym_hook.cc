// Layer 2: dlsym on a handle of libcuda or libnvidia-ml returns our wrapper for hooked names.
//
// Every other lookup is forwarded to glibc's dlsym as a sibling call (a jump, not a call), so
// the return address glibc sees is our caller's: RTLD_NEXT and RTLD_DEFAULT keep resolving
// relative to the object that called dlsym. The preload tests check RTLD_NEXT from a library.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "interpose/hook_table.h"
#include "interpose/loader.h"
#include "interpose/runtime.h"

namespace vgpu {
namespace {

// Handles already recognised as the driver libraries (glibc returns the same handle for every
// dlopen of one library, so after the first hit this is a pointer compare).
std::atomic<void*> g_known_cuda_handle{nullptr};
std::atomic<void*> g_known_nvml_handle{nullptr};

bool HasPrefix(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

enum class HandleKind { kOther, kCuda, kNvml };

HandleKind ClassifyHandle(void* handle) {
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) return HandleKind::kOther;
  if (handle == g_known_cuda_handle.load(std::memory_order_relaxed)) return HandleKind::kCuda;
  if (handle == g_known_nvml_handle.load(std::memory_order_relaxed)) return HandleKind::kNvml;
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    dlerror();  // do not leave our probe's error for the application's dlerror()
    return HandleKind::kOther;
  }
  const char* base = std::strrchr(map->l_name, '/');
  base = base != nullptr ? base + 1 : map->l_name;
  if (HasPrefix(base, "libcuda.so")) {
    g_known_cuda_handle.store(handle, std::memory_order_relaxed);
    return HandleKind::kCuda;
  }
  if (HasPrefix(base, "libnvidia-ml.so")) {
    g_known_nvml_handle.store(handle, std::memory_order_relaxed);
    return HandleKind::kNvml;
  }
  return HandleKind::kOther;
}

void* ResolveDriverSymbol(HandleKind kind, void* handle, const char* name) {
  const bool loaded = kind == HandleKind::kCuda ? EnsureCudaLoaded() : EnsureNvmlLoaded();
  // Not loaded: either no driver, or this lookup comes from inside the driver's own loading.
  if (!loaded || GetRuntime().passthrough()) return RealDlsym()(handle, name);
  const DriverLibrary library = kind == HandleKind::kCuda ? DriverLibrary::kCuda : DriverLibrary::kNvml;
  const int id = FindHookByName(library, name);
  if (id < 0 || g_real[id] == nullptr) return RealDlsym()(handle, name);
  NoteLayerSlow(static_cast<HookId>(id), Layer::kDlsym, nullptr);
  return kHookEntries[id].thunk;
}

}  // namespace
}  // namespace vgpu

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  const vgpu::HandleKind kind = vgpu::ClassifyHandle(handle);
  if (kind != vgpu::HandleKind::kOther) return vgpu::ResolveDriverSymbol(kind, handle, name);
  return vgpu::RealDlsym()(handle, name);  // must stay a sibling call: see the file comment
}
