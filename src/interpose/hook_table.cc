#include "interpose/hook_table.h"

#include <atomic>
#include <cstring>

#include "common/log.h"
#include "interpose/loader.h"

namespace vgpu {

void* g_real[kHookCount] = {};

namespace {

// Open-addressing map from a real driver entry point to its hook. Sized for a load factor
// below 1/4; written only by ResolveRealEntries (before the library is published as loaded),
// read-only afterwards, so lookups take no lock.
constexpr int kMapSlots = 1024;
static_assert(kHookCount * 4 <= kMapSlots, "grow kMapSlots");

struct MapSlot {
  const void* real;
  int id;
};
MapSlot g_real_map[kMapSlots];

size_t SlotFor(const void* p) {
  auto x = reinterpret_cast<uintptr_t>(p);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<size_t>(x) & (kMapSlots - 1);
}

void InsertReal(const void* real, int id) {
  for (size_t i = SlotFor(real);; i = (i + 1) & (kMapSlots - 1)) {
    if (g_real_map[i].real == nullptr) {
      g_real_map[i] = {real, id};
      return;
    }
    if (g_real_map[i].real == real) {
      // Two exported names share one implementation (an alias in the driver). Calls through
      // either wrapper reach the same code, so the first entry keeps the pointer.
      VGPU_DEBUG("%s and %s share one driver entry point", kHookEntries[g_real_map[i].id].name,
                 kHookEntries[id].name);
      return;
    }
  }
}

std::atomic<uint8_t> g_layers_noted[kHookCount];

const char* LayerName(Layer layer) {
  switch (layer) {
    case Layer::kExport: return "exported symbol";
    case Layer::kDlsym: return "dlsym";
    case Layer::kProcAddress: return "cuGetProcAddress";
  }
  return "?";
}

// The hooks of one library: CUDA entries come first in the table, NVML entries after them.
struct HookRange {
  int begin;
  int end;
};

HookRange RangeOf(DriverLibrary library) {
  return library == DriverLibrary::kCuda ? HookRange{0, kFirstNvmlHook} : HookRange{kFirstNvmlHook, kHookCount};
}

}  // namespace

int FindHookByName(DriverLibrary library, const char* name) {
  if (name == nullptr) return -1;
  const HookRange range = RangeOf(library);
  for (int i = range.begin; i < range.end; ++i) {
    if (std::strcmp(kHookEntries[i].name, name) == 0) return i;
  }
  return -1;
}

void ResolveRealEntries(DriverLibrary library, void* handle) {
  DlsymFn real_dlsym = RealDlsym();
  const HookRange range = RangeOf(library);
  for (int i = range.begin; i < range.end; ++i) {
    g_real[i] = real_dlsym(handle, kHookEntries[i].name);
    if (g_real[i] == nullptr) {
      VGPU_DEBUG("driver does not export %s; calls to it are answered as not found",
                 kHookEntries[i].name);
      continue;
    }
    if (library == DriverLibrary::kCuda) InsertReal(g_real[i], i);
  }
}

void* ThunkForRealPointer(const void* real, HookId* id_out) {
  if (real == nullptr) return nullptr;
  for (size_t i = SlotFor(real);; i = (i + 1) & (kMapSlots - 1)) {
    const MapSlot& slot = g_real_map[i];
    if (slot.real == nullptr) return nullptr;
    if (slot.real == real) {
      if (id_out != nullptr) *id_out = static_cast<HookId>(slot.id);
      return kHookEntries[slot.id].thunk;
    }
  }
}

void NoteLayerSlow(HookId id, Layer layer, const char* detail) {
  const auto bit = static_cast<uint8_t>(layer);
  if (g_layers_noted[id].fetch_or(bit, std::memory_order_relaxed) & bit) return;
  VGPU_LOG_UNLIMITED(LogLevel::kDebug, "hook %s reached through %s%s%s", kHookEntries[id].name, LayerName(layer),
             detail != nullptr ? " " : "", detail != nullptr ? detail : "");
}

void NoteExportedCallSlow(HookId id) { NoteLayerSlow(id, Layer::kExport, nullptr); }

}  // namespace vgpu
