// Configuration of the Kubernetes side of vgpu-node. Every key is documented in
// docs/kubernetes.md; vgpu-node reads them from its config file / flags and hands them over
// one by one (ApplyPluginSetting), then calls FinishPluginConfig.
#pragma once

#include <functional>
#include <string>

#include "k8s/container_grant.h"
#include "k8s/kube_client.h"
#include "k8s/status.h"

namespace vgpu::k8s {

enum class PluginMode { kOff, kHami, kVolcano, kStandalone };

const char* PluginModeName(PluginMode mode);

struct PluginConfig {
  PluginMode mode = PluginMode::kOff;
  std::string node_name;  // default: $NODE_NAME
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  NodePaths paths;        // state_dir, library_path, preload_path
  int split_count = 10;   // containers per GPU (hami, volcano)
  double memory_scaling = 1.0;  // hami: memory reported = physical × scaling
  int register_interval_s = 30;
  int update_attempts = 5;
  std::string hami_resource = "nvidia.com/gpu";
  std::string volcano_number_resource = "volcano.sh/vgpu-number";
  std::string volcano_memory_resource = "volcano.sh/vgpu-memory";
  std::string volcano_cores_resource = "volcano.sh/vgpu-cores";
  int volcano_memory_factor = 1;  // MiB per volcano.sh/vgpu-memory unit
  std::string standalone_memory_resource = "vgpu.io/memory";
  std::string standalone_compute_resource = "vgpu.io/compute";
  int pairing_window_ms = 1000;
  // standalone: the kubelet's pod resources API (which containers still hold a grant's devices).
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  KubeClientOptions api;  // api.server empty: in-cluster configuration
};

// Applies one "key = value". Errors name the key and the value: unknown key, malformed number,
// value out of range, unknown mode or preset.
Status ApplyPluginSetting(const std::string& key, const std::string& value, PluginConfig* config);

// Fills what was not given from the environment (node name from NODE_NAME; the in-cluster API
// configuration when api_server is unset and the mode needs the API) and checks the result.
Status FinishPluginConfig(const std::function<const char*(const char*)>& getenv, PluginConfig* config);

}  // namespace vgpu::k8s
