// Process-local record of what each live allocation was charged: pointer or handle -> (ledger
// device, bytes, kind). Frees look up exactly what was charged in O(1).
//
// Thread safety: sharded; each shard has its own mutex, held only for the map operation.
// After fork() the child starts with an empty map (the parent's device allocations are not the
// child's): ResetAfterFork() runs in the child's atfork handler.
#pragma once

#include <cstdint>
#include <optional>

namespace vgpu::memory {

// Separate key spaces: an array handle and a device pointer may have the same numeric value.
// (VMM handles and pools keep their own tables: handlers_vmm.cc, memory_pools.cc.)
enum class KeySpace : uint8_t { kPointer, kArray, kMipmappedArray, kGraphExec };

enum class AllocKind : uint8_t {
  kDevice,      // cuMemAlloc, cuMemAllocPitch
  kManaged,     // cuMemAllocManaged
  kPoolBlock,   // cuMemAllocAsync / FromPoolAsync: charged through its pool, not per block
  kArray,       // cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate
  kGraph,       // memory-allocation nodes of an instantiated graph
  kSpilled,     // oversubscription: host-resident managed memory, charged to the host budget
};

struct AllocRecord {
  int device = -1;     // ledger device index
  AllocKind kind = AllocKind::kDevice;
  uint64_t bytes = 0;  // what was charged; for a pool block its size (the pool carries the charge)
  uint64_t aux = 0;    // pool handle for kPoolBlock
};

void Track(KeySpace space, uint64_t key, const AllocRecord& record);
// Removes and returns the record, if any.
std::optional<AllocRecord> Take(KeySpace space, uint64_t key);
// Returns a copy of the record without removing it.
std::optional<AllocRecord> Find(KeySpace space, uint64_t key);
// Adds `delta` (may be negative) to the record's bytes; returns the new value, or nullopt.
std::optional<uint64_t> Adjust(KeySpace space, uint64_t key, int64_t delta);

void ResetAfterFork();

}  // namespace vgpu::memory
