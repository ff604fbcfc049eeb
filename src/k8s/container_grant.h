// What one container is granted, and how that becomes the kubelet's ContainerAllocateResponse
// and the ledger limits (CONTRACT.md, "Container side").
//
// Host side (NodePaths, defaults; each is a vgpu-node option):
//   <state_dir>/containers/<key>/ledger   the container's ledger, written by vgpu-node
//   <state_dir>/vgpu.sock                 the registration socket
//   <state_dir>/board                     the node-wide compute board
//   /usr/local/vgpu/libvgpu.so, /usr/local/vgpu/ld.so.preload
// Container side (fixed):
//   /usr/local/vgpu/libvgpu.so (ro)       /etc/ld.so.preload (ro, unless CUDA_DISABLE_CONTROL)
//   /var/lib/vgpu/container (rw)          /var/lib/vgpu/vgpu.sock     /var/lib/vgpu/board
//   env NVIDIA_VISIBLE_DEVICES, CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT_<i>,
//       CUDA_DEVICE_MEMORY_SHARED_CACHE, VGPU_SOCKET, VGPU_BOARD, and when known
//       CUDA_TASK_PRIORITY, VGPU_POD_UID, VGPU_CONTAINER_NAME.
// (The socket mount and VGPU_SOCKET only with register_with_daemon.)
//
// The ledger limits are derived from exactly the environment handed to the container, through
// the library's own parser (common/config.h, ledger/limits_from_config.h), so a process in the
// container finds the ledger in agreement with its environment.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k8s/status.h"
#include "ledger/ledger.h"

namespace v1beta1 {
class ContainerAllocateResponse;
}

namespace vgpu::k8s {

inline constexpr char kContainerLibraryPath[] = "/usr/local/vgpu/libvgpu.so";
inline constexpr char kContainerPreloadPath[] = "/etc/ld.so.preload";
inline constexpr char kContainerStateDir[] = "/var/lib/vgpu/container";
inline constexpr char kContainerLedgerPath[] = "/var/lib/vgpu/container/ledger";
inline constexpr char kContainerSocketPath[] = "/var/lib/vgpu/vgpu.sock";
inline constexpr char kContainerBoardPath[] = "/var/lib/vgpu/board";

struct NodePaths {
  std::string state_dir = "/var/lib/vgpu";
  std::string socket;  // "" = <state_dir>/vgpu.sock
  std::string library = "/usr/local/vgpu/libvgpu.so";
  std::string preload_file = "/usr/local/vgpu/ld.so.preload";

  std::string ContainerDir(const std::string& key) const { return state_dir + "/containers/" + key; }
  std::string Socket() const { return socket.empty() ? state_dir + "/vgpu.sock" : socket; }
  std::string Board() const { return state_dir + "/board"; }
};

struct GrantedGpu {
  std::string uuid;
  uint64_t memory_bytes = 0;  // 0 = no memory limit
  int sm_limit = 0;           // percent; 0 or 100 = no compute limit
};

struct ContainerGrant {
  std::string key;                // directory name under <state_dir>/containers
  std::vector<GrantedGpu> gpus;   // in the container's CUDA ordinal order
  std::string pod_uid;            // VGPU_POD_UID; standalone: a made-up "standalone-<id>"
  std::string container_name;     // VGPU_CONTAINER_NAME; standalone: "vgpu"
  std::string pod_namespace;      // for the daemon's records and metrics (empty when unknown)
  std::string pod_name;
  bool skip_preload = false;      // the container sets CUDA_DISABLE_CONTROL=true
  // Mount the registration socket and set VGPU_SOCKET. Off for standalone vGPUs: vgpu-node
  // verifies a registering process against its pod's cgroup, and a standalone grant does not know
  // the pod (the library then does not register; the ledger still enforces the limits).
  bool register_with_daemon = true;
  int task_priority = -1;         // -1 = not set
};

// "<pod-uid>_<container-name>", the contract's directory name.
std::string ContainerKey(const std::string& pod_uid, const std::string& container_name);

// A directory name is one path component of [A-Za-z0-9._-], not "." or "..", at most 200 bytes.
Status ValidateContainerKey(const std::string& key);

// The environment variables the container gets.
std::map<std::string, std::string> GrantEnvironment(const ContainerGrant& grant);

// The ledger limits for the grant (authority: node daemon). Errors when the environment would be
// rejected by the library (for instance more than 16 GPUs).
Status GrantLimits(const ContainerGrant& grant, ledger::LimitSet* limits);

// Fills `response` (envs and mounts) for the grant.
void BuildContainerResponse(const ContainerGrant& grant, const NodePaths& paths,
                            v1beta1::ContainerAllocateResponse* response);

}  // namespace vgpu::k8s
