// PodResourcesClient: the kubelet's pod resources API (v1 List, podresources.proto) over its unix
// socket, <kubelet root>/pod-resources/kubelet.sock. vgpu-node's standalone mode reads it to learn
// which containers still hold the device IDs of its grants (standalone_lifetime.h).
//
// Thread safety: List may be called from any thread (one channel, reused).
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "k8s/standalone_lifetime.h"
#include "k8s/status.h"

namespace vgpu::k8s {

class PodResourcesClient {
 public:
  explicit PodResourcesClient(std::string socket_path,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  ~PodResourcesClient();

  // Lists every pod and every container's devices. Errors name the socket and the gRPC status (no
  // such socket, no answer within the timeout, a kubelet without v1).
  Status List(PodResourcesSnapshot* snapshot);

 private:
  struct Channel;
  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<Channel> channel_;
};

}  // namespace vgpu::k8s
