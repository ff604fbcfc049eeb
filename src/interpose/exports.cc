// Generated from the hook tables: for every entry, the exported function with the driver's exact
// symbol name (layer 1), the thunk that dlsym and cuGetProcAddress hand out (layers 2 and 3), and
// kHookEntries[].
//
// Exported definitions use an asm label for the symbol name, so the C++ identifier never meets
// cuda.h's version macros.
#include <cuda.h>

#include "common/log.h"
#include "interpose/compute_limit.h"
#include "interpose/handlers.h"
#include "interpose/hook_table.h"
#include "interpose/loader.h"

#define VGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

inline void NoteExportedCall(vgpu::HookId id) {
  if (__builtin_expect(vgpu::LogEnabled(vgpu::LogLevel::kDebug), 0)) vgpu::NoteExportedCallSlow(id);
}

}  // namespace

// Dispatch for each kind: OWN calls the handler, PASS forwards to the real entry, GATED forwards
// like PASS unless a compute limit is enabled (one relaxed load), then calls the handler.
// The symbol reaches these macros only as tokens pasted at the first level (kHook_x, Pfn_x,
// hook_x), never as a bare name a cuda.h macro could rewrite.
// The exported variants note the call for the verbose log after the library state (and so the
// log level) has been initialised by the handler or by RealCuda()/RealNvml().
#define VGPU_THUNK_OWN(ret, lib, id, pfn, handler, args) return vgpu::hooks::handler args;
#define VGPU_EXPORT_OWN(ret, lib, id, pfn, handler, args) \
  const ret result = vgpu::hooks::handler args;            \
  NoteExportedCall(vgpu::id);                              \
  return result;
#define VGPU_THUNK_PASS(ret, lib, id, pfn, handler, args)                              \
  void* real = vgpu::Real##lib(vgpu::id);                                              \
  if (__builtin_expect(real == nullptr, 0)) return vgpu::Missing##lib##Entry(vgpu::id); \
  return reinterpret_cast<vgpu::pfn>(real) args;
#define VGPU_EXPORT_PASS(ret, lib, id, pfn, handler, args)                             \
  void* real = vgpu::Real##lib(vgpu::id);                                              \
  if (__builtin_expect(real == nullptr, 0)) return vgpu::Missing##lib##Entry(vgpu::id); \
  NoteExportedCall(vgpu::id);                                                          \
  return reinterpret_cast<vgpu::pfn>(real) args;

#define VGPU_THUNK_GATED(ret, lib, id, pfn, handler, args)                             \
  void* real = vgpu::Real##lib(vgpu::id);                                              \
  if (__builtin_expect(real == nullptr, 0)) return vgpu::Missing##lib##Entry(vgpu::id); \
  if (__builtin_expect(!vgpu::compute_limit::Enabled(), 1)) return reinterpret_cast<vgpu::pfn>(real) args; \
  return vgpu::hooks::handler args;
#define VGPU_EXPORT_GATED(ret, lib, id, pfn, handler, args)                            \
  void* real = vgpu::Real##lib(vgpu::id);                                              \
  if (__builtin_expect(real == nullptr, 0)) return vgpu::Missing##lib##Entry(vgpu::id); \
  NoteExportedCall(vgpu::id);                                                          \
  if (__builtin_expect(!vgpu::compute_limit::Enabled(), 1)) return reinterpret_cast<vgpu::pfn>(real) args; \
  return vgpu::hooks::handler args;

#define VGPU_DEFINE_HOOK(kind, ret, lib, name, id, pfn, handler, exported, thunk, params, args) \
  VGPU_EXPORT ret exported params __asm__(name);                                              \
  VGPU_EXPORT ret exported params { VGPU_EXPORT_##kind(ret, lib, id, pfn, handler, args) }    \
  static ret thunk params { VGPU_THUNK_##kind(ret, lib, id, pfn, handler, args) }

#define VGPU_CUDA_HOOK(kind, sym, params, args)                                              \
  VGPU_DEFINE_HOOK(kind, CUresult, Cuda, #sym, kHook_##sym, Pfn_##sym, hook_##sym,           \
                   vgpu_export_##sym, vgpu_thunk_##sym, params, args)
#define VGPU_NVML_HOOK(kind, sym, params, args)                                              \
  VGPU_DEFINE_HOOK(kind, nvmlReturn_t, Nvml, #sym, kHook_##sym, Pfn_##sym, hook_##sym,       \
                   vgpu_export_##sym, vgpu_thunk_##sym, params, args)
#include "interpose/cuda_hooks.def"
#include "interpose/nvml_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK

namespace vgpu {

const HookEntry kHookEntries[kHookCount] = {
#define VGPU_CUDA_HOOK(kind, sym, params, args) \
  {#sym, reinterpret_cast<void*>(&vgpu_export_##sym), reinterpret_cast<void*>(&vgpu_thunk_##sym), DriverLibrary::kCuda},
#define VGPU_NVML_HOOK(kind, sym, params, args) \
  {#sym, reinterpret_cast<void*>(&vgpu_export_##sym), reinterpret_cast<void*>(&vgpu_thunk_##sym), DriverLibrary::kNvml},
#include "interpose/cuda_hooks.def"
#include "interpose/nvml_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK
};

}  // namespace vgpu
