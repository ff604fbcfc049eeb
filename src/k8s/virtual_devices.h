// Virtual device IDs: how one physical GPU is advertised to the kubelet as many countable units,
// and which units to prefer when the kubelet asks (GetPreferredAllocation).
//
//   style          id                 used by
//   kUuidDash      "<uuid>-<n>"       HAMi nvidia.com/gpu, Volcano vgpu-number (n < split count)
//   kIndexDash     "<index>-<n>"      Volcano vgpu-memory (n < memory units), vgpu-cores (n < 100)
//   kUuidUnderscore "<uuid>_<n>"      standalone memory (n < GiB) and compute (n < 100) (Alnair)
//
// The IDs mean nothing to the schedulers; they only let the kubelet count. Their length matters:
// a ListAndWatch message must stay under gRPC's 4 MiB default, which is why the many memory
// units of Volcano use the short index form.
#pragma once

#include <string>
#include <vector>

#include "k8s/gpu_inventory.h"

namespace vgpu::k8s {

enum class UnitIdStyle { kUuidDash, kIndexDash, kUuidUnderscore };

std::string UnitId(UnitIdStyle style, const GpuInfo& gpu, int n);

// Resolves a unit ID to its GPU in `gpus`; nullptr when malformed or the GPU is unknown.
const GpuInfo* GpuOfUnit(UnitIdStyle style, const std::string& id, const std::vector<GpuInfo>& gpus);

enum class Placement {
  kDistinctGpus,  // one unit per GPU as far as possible (a request for N GPUs)
  kSameGpu,       // all units on one GPU (one vGPU: memory or compute units)
};

// The kubelet's question: choose `size` of `available` (always including `must_include`).
// kSameGpu: the GPU of must_include if any, else `preferred_gpu` when it has enough units, else
// the GPU with the fewest available units that still holds `size` (pack small requests, keep
// whole GPUs free); when no single GPU holds enough, the units of the fullest GPUs.
// kDistinctGpus: round-robin over GPUs, most available first.
// Units of unknown GPUs are used last. The result has min(size, |available ∪ must_include|)
// entries and keeps must_include first. Deterministic for a given input.
std::vector<std::string> PreferredUnits(UnitIdStyle style, Placement placement, const std::vector<GpuInfo>& gpus,
                                        const std::vector<std::string>& available,
                                        const std::vector<std::string>& must_include, int size,
                                        const std::string& preferred_gpu = "");

}  // namespace vgpu::k8s
