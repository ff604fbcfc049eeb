// The Kubernetes plugin hosted by vgpu-node (node_mode.cc registers the mode modules "hami",
// "volcano" and "standalone"). These two conversions are the module's only logic; they are
// declared here for the tests.
#pragma once

#include <vector>

#include "k8s/gpu_inventory.h"
#include "k8s/plugin_config.h"
#include "node/gpu_health.h"
#include "node/gpu_source.h"
#include "node/node_config.h"

namespace vgpu::k8s {

// The plugin's configuration from the daemon's: the mode, node name and state dir from the
// daemon; every module option "<mode>.<key>" applied with ApplyPluginSetting (options of other
// modules are ignored); then FinishPluginConfig with the process environment. Errors name the
// option.
Status ConfigFromNode(PluginMode mode, const node::NodeConfig& node_config, PluginConfig* out);

// The GPUs from the daemon's NVML inventory and health: a GPU is healthy when its samples are
// readable and its health state (matched by uuid) is healthy. GPUs without a uuid are left out.
std::vector<GpuInfo> GpusFromFeed(const std::vector<node::GpuSample>& inventory,
                                  const std::vector<node::GpuHealth>& health);

}  // namespace vgpu::k8s
