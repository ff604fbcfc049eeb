// KubeletRegistrar: keeps every PluginEndpoint served and registered with the kubelet.
//
// The kubelet serves Registration on <dir>/kubelet.sock. When it restarts it deletes the plugin
// sockets in <dir> and creates a new kubelet.sock; plugins must then serve again and
// re-register. The registrar watches <dir> with inotify (and also checks every poll interval,
// so a missed event costs at most that long):
//   - an endpoint whose socket file is gone is restarted (a new socket);
//   - every endpoint is registered (Register: version "v1beta1", endpoint = socket file name,
//     resource name, options) whenever the kubelet.sock it registered with is not the one in
//     place (first start, kubelet restart, endpoint restart);
//   - a failed Register is retried after `retry`.
//
// Thread safety: Start/Stop from one thread; the registrar runs one thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "k8s/device_plugin_server.h"

namespace vgpu::k8s {

inline constexpr char kKubeletSocketName[] = "kubelet.sock";
inline constexpr char kDevicePluginVersion[] = "v1beta1";

struct KubeletRegistrarOptions {
  std::string directory = "/var/lib/kubelet/device-plugins";
  std::chrono::milliseconds poll{500};
  std::chrono::milliseconds retry{1000};
  std::chrono::milliseconds register_timeout{3000};
};

class KubeletRegistrar {
 public:
  // Endpoints must outlive the registrar; the registrar starts and stops them.
  KubeletRegistrar(KubeletRegistrarOptions options, std::vector<PluginEndpoint*> endpoints);
  ~KubeletRegistrar();

  // Starts every endpoint (errors when one cannot serve) and the watch thread.
  Status Start();
  // Stops the thread and every endpoint.
  void Stop();

  // Successful Register calls so far, over all endpoints.
  int registrations() const { return registrations_.load(); }

 private:
  void Loop();
  Status Register(PluginEndpoint* endpoint);

  const KubeletRegistrarOptions options_;
  const std::vector<PluginEndpoint*> endpoints_;
  std::atomic<bool> stop_{false};
  std::atomic<int> registrations_{0};
  int wake_fd_ = -1;  // eventfd that interrupts the loop's poll
  std::thread thread_;
};

}  // namespace vgpu::k8s
