// Loading the real CUDA driver and NVML: once, lazily, recursion-safe.
//
// Nothing happens in ELF constructors. The first hook that needs a library calls
// EnsureCudaLoaded()/EnsureNvmlLoaded(), which dlopen()s it and resolves every hooked entry.
//   - Once: pthread_once (glibc's is fork-aware: a child forked during loading can load again).
//   - Recursion: if loading the driver re-enters a hook on the same thread (a driver constructor
//     calling dlsym on its own handle, say), the inner call sees "not loaded" and the caller
//     passes the request straight through instead of deadlocking on the once-guard.
//   - Hot path: one acquire load of the state word.
#pragma once

#include <atomic>

#include "interpose/hook_table.h"

namespace vgpu {

enum LoadState : int { kNotLoaded = 0, kLoaded = 1, kUnavailable = 2 };

inline std::atomic<int> g_cuda_state{kNotLoaded};
inline std::atomic<int> g_nvml_state{kNotLoaded};

bool EnsureCudaLoadedSlow();
bool EnsureNvmlLoadedSlow();

inline bool EnsureCudaLoaded() {
  return __builtin_expect(g_cuda_state.load(std::memory_order_acquire) == kLoaded, 1) ||
         EnsureCudaLoadedSlow();
}
inline bool EnsureNvmlLoaded() {
  return __builtin_expect(g_nvml_state.load(std::memory_order_acquire) == kLoaded, 1) ||
         EnsureNvmlLoadedSlow();
}

// The real entry for `id`, or nullptr when the library is unavailable or lacks the name.
inline void* RealCuda(HookId id) { return EnsureCudaLoaded() ? g_real[id] : nullptr; }
inline void* RealNvml(HookId id) { return EnsureNvmlLoaded() ? g_real[id] : nullptr; }

// RealCuda typed with the entry's function-pointer type: RealCudaAs<Pfn_cuMemAlloc_v2>(...).
template <typename Pfn>
Pfn RealCudaAs(HookId id) {
  return reinterpret_cast<Pfn>(RealCuda(id));
}

// dlopen() handles of the real libraries (nullptr until loaded).
void* CudaHandle();
void* NvmlHandle();

// Result for a call whose real entry is missing; logs once per hook.
CUresult MissingCudaEntry(HookId id);
nvmlReturn_t MissingNvmlEntry(HookId id);

// glibc's dlsym, found with dlvsym (never through private glibc symbols).
using DlsymFn = void* (*)(void*, const char*);
DlsymFn RealDlsym();

}  // namespace vgpu
