// Hook identities, the real driver's entry points, and the wrappers handed out for them.
//
// Everything here is generated from cuda_hooks.def and nvml_hooks.def (the one hook table).
// Symbol names are only ever used through # and ## in the generating macros, so cuda.h's
// version macros (#define cuMemAlloc cuMemAlloc_v2) cannot rename an entry.
//
// Thread safety: g_real[] is written once by the loader before it publishes "loaded" with a
// release store (loader.h); readers go through RealCuda()/RealNvml(), which acquire that state.
// The real->wrapper map is built at the same time and is read-only afterwards.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "interpose/nvml_types.h"

namespace vgpu {

using DevicePtrV1 = unsigned int;  // CUdeviceptr of the pre-3.2 (v1) driver ABI

// CUDA_ARRAY_DESCRIPTOR_v1 / CUDA_ARRAY3D_DESCRIPTOR_v1 of the pre-3.2 ABI (cuda.h declares them
// for internal builds only).
struct ArrayDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct Array3DDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

enum HookId : int {
#define VGPU_CUDA_HOOK(kind, sym, params, args) kHook_##sym,
#define VGPU_NVML_HOOK(kind, sym, params, args)
#include "interpose/cuda_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK
  kFirstNvmlHook,
  kHookPlaceholder_ = kFirstNvmlHook - 1,
#define VGPU_CUDA_HOOK(kind, sym, params, args)
#define VGPU_NVML_HOOK(kind, sym, params, args) kHook_##sym,
#include "interpose/nvml_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK
  kHookCount
};

enum class DriverLibrary : uint8_t { kCuda, kNvml };

// Ways a caller can reach a hook; used for the verbose log of which layer handed out what.
enum class Layer : uint8_t { kExport = 1, kDlsym = 2, kProcAddress = 4 };

// Function-pointer types with the exact ABI of each entry: Pfn_cuMemAlloc_v2, ...
#define VGPU_CUDA_HOOK(kind, sym, params, args) using Pfn_##sym = CUresult(*) params;
#define VGPU_NVML_HOOK(kind, sym, params, args) using Pfn_##sym = nvmlReturn_t(*) params;
#include "interpose/cuda_hooks.def"
#include "interpose/nvml_hooks.def"
#undef VGPU_CUDA_HOOK
#undef VGPU_NVML_HOOK

struct HookEntry {
  const char* name;      // exported symbol name, e.g. "cuMemAlloc_v2"
  void* exported;        // our exported function of that name (layer 1)
  void* thunk;           // what dlsym / cuGetProcAddress hand out for it (layers 2 and 3)
  DriverLibrary library;
};

// Defined in exports.cc, indexed by HookId.
extern const HookEntry kHookEntries[kHookCount];

// Real entry points, indexed by HookId; nullptr where the driver does not export the name.
extern void* g_real[kHookCount];

// Returns the hook whose exported name is `name` in `library`, or -1.
int FindHookByName(DriverLibrary library, const char* name);

// Fills g_real[] for `library` from `handle` and (for CUDA) builds the real->thunk map.
// Called by the loader, once, before it publishes the library as loaded.
void ResolveRealEntries(DriverLibrary library, void* handle);

// Maps a pointer returned by the real cuGetProcAddress to the thunk with the same ABI.
// Returns nullptr for pointers that are not a hooked entry (they pass through untouched).
void* ThunkForRealPointer(const void* real, HookId* id_out);

// Verbose-log bookkeeping: logs the first time `id` is reached through `layer` (debug level).
void NoteLayerSlow(HookId id, Layer layer, const char* detail);
void NoteExportedCallSlow(HookId id);

}  // namespace vgpu
