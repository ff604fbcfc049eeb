// PluginEndpoint: serves one ResourcePlugin to the kubelet over gRPC on a unix socket in the
// kubelet's device-plugins directory (DevicePlugin service, v1beta1).
//
//   GetDevicePluginOptions  the plugin's options (GetPreferredAllocation available)
//   ListAndWatch            the device list at once, then again whenever the Inventory changes
//                           (a GPU turns unhealthy or recovers); ends when the endpoint stops
//   GetPreferredAllocation  per container, ResourcePlugin::PreferredAllocation
//   Allocate                ResourcePlugin::Allocate; a failure is returned to the kubelet as
//                           FAILED_PRECONDITION with the plugin's message
//   PreStartContainer       nothing to do (not requested in the options)
// No handler lets an exception escape: an unexpected one fails that call with INTERNAL.
//
// Thread safety: Start/Stop from one thread (the registrar's); handlers run on gRPC's threads.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "k8s/inventory.h"
#include "k8s/resource_plugin.h"
#include "k8s/status.h"

namespace grpc {
class Server;
}

namespace vgpu::k8s {

class PluginEndpoint {
 public:
  // `plugin` and `inventory` must outlive the endpoint.
  PluginEndpoint(ResourcePlugin* plugin, Inventory* inventory, std::string directory);
  ~PluginEndpoint();
  PluginEndpoint(const PluginEndpoint&) = delete;
  PluginEndpoint& operator=(const PluginEndpoint&) = delete;

  // Removes a stale socket file, listens on <directory>/<socket name> and serves. Restarting a
  // running endpoint stops it first.
  Status Start();
  // Stops serving (open ListAndWatch streams end) and removes the socket file if it is still ours.
  void Stop();
  bool running() const;
  // The socket file this endpoint created is still in place (a restarting kubelet deletes it).
  bool SocketIntact() const;

  const std::string& socket_path() const { return socket_path_; }
  ResourcePlugin* plugin() const { return plugin_; }
  int allocate_calls() const;

 private:
  class Service;
  ResourcePlugin* const plugin_;
  Inventory* const inventory_;
  const std::string socket_path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  dev_t socket_dev_ = 0;
  ino_t socket_inode_ = 0;
};

}  // namespace vgpu::k8s
