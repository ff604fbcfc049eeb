// K8sPlugin: the Kubernetes side of vgpu-node, assembled for one mode.
//
//   mode        kubelet resources (one gRPC endpoint each)            API server use
//   hami        nvidia.com/gpu: <uuid>-<n>, split_count per GPU        node registration + handshake,
//                                                                      pod/lock protocol (scheduler_allocator.h)
//   volcano     volcano.sh/vgpu-number (<uuid>-<n>), vgpu-memory        same, Volcano's names
//               (<index>-<n>, MiB/factor per GPU), vgpu-cores (100)
//   standalone  <memory> (<uuid>_<n>, one per GiB), <compute> (100)     none (standalone_allocator.h)
//
// The daemon creates the plugin with its configuration, the GPUs it found, and optionally its
// own ContainerStore and KubeApi; then Start(), SetGpus() on every health change, Stop() at exit.
// Thread safety: Start/Stop from one thread; SetGpus from any thread.
#pragma once

#include <memory>
#include <vector>

#include "k8s/container_store.h"
#include "k8s/gpu_inventory.h"
#include "k8s/kube_api.h"
#include "k8s/plugin_config.h"

namespace vgpu::k8s {

struct K8sPluginDeps {
  ContainerStore* store = nullptr;  // nullptr: a LedgerDirectoryStore on <state_dir>/containers
  std::unique_ptr<KubeApi> api;     // nullptr: HttpKubeApi from the configuration (hami, volcano)
};

class K8sPlugin {
 public:
  // Errors: mode off, a resource whose ListAndWatch would exceed 4 MiB for these GPUs (names the
  // setting to change), an API client that cannot be built.
  static std::unique_ptr<K8sPlugin> Create(const PluginConfig& config, std::vector<GpuInfo> gpus, K8sPluginDeps deps,
                                           Status* status);
  ~K8sPlugin();

  // Serves every resource, registers with the kubelet, starts the node reporter (hami, volcano).
  Status Start();
  void Stop();

  void SetGpus(std::vector<GpuInfo> gpus);

  int registrations() const;

 private:
  struct Parts;
  explicit K8sPlugin(std::unique_ptr<Parts> parts);
  static Status AssembleSchedulerMode(Parts* parts, std::unique_ptr<KubeApi> api);
  static void AssembleStandaloneMode(Parts* parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace vgpu::k8s
