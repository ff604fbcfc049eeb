// StandaloneAllocator: fractional GPUs for the stock kube-scheduler, no extender and no API
// server. Two countable resources per node:
//   memory   one unit per whole GiB of a GPU ("<uuid>_<n>")          e.g. alnair/vgpu-memory
//   compute  100 units per GPU, one per percent ("<uuid>_<n>")     e.g. alnair/vgpu-compute
// A container's vGPU is the GPU its units are on, with memory = memory units GiB and compute =
// compute units percent. GetPreferredAllocation keeps one container's units of a resource on
// one GPU; units that land on several GPUs fail the Allocate (a vGPU is one GPU).
//
// Joining the two resources. The kubelet allocates a container's resources one after another,
// in either order, in separate Allocate calls that carry no pod or container identity. The
// allocator therefore joins a memory allocation and a compute allocation that follow each other
// directly (no other Allocate in between) within `pairing_window`:
//   - the first call creates the container's directory "standalone-<id>_vgpu", writes the ledger with
//     its half of the limits, and answers with the full grant (mounts and variables);
//   - while it is open, GetPreferredAllocation of the other resource prefers the same GPU;
//   - the second call, if on the same GPU, rewrites that ledger with both halves and answers with
//     the same mounts (the kubelet keeps one mount per container path) and its limit variable;
//     on another GPU it fails.
// A container that requests only one of the two resources gets only that limit. Its processes
// do not register with vgpu-node (no socket mount, no VGPU_SOCKET: the daemon checks a
// registration against the pod's cgroup, and the pod is unknown here). Limitation
// (docs/kubernetes.md): when a container that requests only memory is admitted immediately
// before one that requests both and the kubelet happens to allocate the second container's
// compute first, the join pairs the wrong allocations. Use the hami or volcano mode where
// containers mix such requests.
//
// Thread safety: calls are serialised internally.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "k8s/container_grant.h"
#include "k8s/container_store.h"
#include "k8s/deviceplugin.pb.h"
#include "k8s/gpu_inventory.h"

namespace vgpu::k8s {

inline constexpr uint64_t kStandaloneMemoryUnit = 1024ull * 1024 * 1024;  // 1 GiB
// The kubelet tells the plugin nothing about the pod: a standalone vGPU is named
// pod uid StandaloneKey(resource, device IDs of its first Allocate) = "standalone-<16 hex
// digits>", container "vgpu" (directory "standalone-<id>_vgpu"). Derived from the device IDs, the
// name tells which container holds the vGPU in the kubelet's pod resources list
// (standalone_lifetime.h), also after a daemon restart.
inline constexpr char kStandaloneContainerName[] = "vgpu";

enum class StandaloneKind { kMemory, kCompute };

struct StandaloneOptions {
  NodePaths paths;
  std::chrono::milliseconds pairing_window{1000};
  // The two resource names (the key of a grant hashes the name of its first half's resource).
  std::string memory_resource = "vgpu.io/memory";
  std::string compute_resource = "vgpu.io/compute";
  // Clock and pod-uid source; tests replace them.
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
  // The pod uid of a new grant from its first Allocate; default StandaloneKey(resource, ids).
  std::function<std::string(StandaloneKind kind, const std::vector<std::string>& device_ids)> new_key;
};

// Units of `kind` a GPU advertises: whole GiB of memory, or 100.
int StandaloneUnits(StandaloneKind kind, const GpuInfo& gpu);

class StandaloneAllocator {
 public:
  StandaloneAllocator(StandaloneOptions options, ContainerStore* store);

  Status Allocate(StandaloneKind kind, const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                  v1beta1::AllocateResponse* response);
  // The GPU of an open allocation of the other kind ("" when none), for GetPreferredAllocation.
  std::string PreferredGpu(StandaloneKind kind);

 private:
  struct Half {
    StandaloneKind kind;
    std::string uuid;
    int units = 0;
    std::string key;
    std::chrono::steady_clock::time_point at;
  };
  Status AllocateContainer(StandaloneKind kind, const std::vector<GpuInfo>& gpus,
                           const v1beta1::ContainerAllocateRequest& request,
                           v1beta1::ContainerAllocateResponse* response);
  bool Joinable(StandaloneKind kind) const;  // REQUIRES: mu_ held

  StandaloneOptions options_;
  ContainerStore* const store_;
  std::mutex mu_;
  std::optional<Half> open_;  // guarded by mu_: the last allocation, while it may still be joined
};

}  // namespace vgpu::k8s
