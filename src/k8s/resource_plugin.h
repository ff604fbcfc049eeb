// ResourcePlugin: one resource the kubelet sees (nvidia.com/gpu, volcano.sh/vgpu-memory, …):
// its devices, its preferred allocation, and its Allocate. The gRPC layer
// (device_plugin_server.h) turns kubelet calls into calls on this interface; the modes
// (scheduler_allocator.h, standalone_allocator.h) supply the Allocate logic.
//
// UnitResource is the one implementation: every resource vgpu-node serves is "N countable units
// per GPU" (virtual_devices.h); what differs is the count, the ID style, the placement and what
// Allocate does.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "k8s/deviceplugin.pb.h"
#include "k8s/gpu_inventory.h"
#include "k8s/status.h"
#include "k8s/virtual_devices.h"

namespace vgpu::k8s {

inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kUnhealthy[] = "Unhealthy";
// gRPC's default maximum message size; ListAndWatch answers must stay below it.
inline constexpr size_t kMaxListAndWatchBytes = 4 * 1024 * 1024;

class ResourcePlugin {
 public:
  virtual ~ResourcePlugin() = default;
  virtual const std::string& resource_name() const = 0;
  // The socket file name in the kubelet's device-plugins directory.
  virtual std::string socket_name() const = 0;
  virtual v1beta1::DevicePluginOptions Options() const = 0;
  virtual void ListDevices(const std::vector<GpuInfo>& gpus, v1beta1::ListAndWatchResponse* out) const = 0;
  virtual Status PreferredAllocation(const std::vector<GpuInfo>& gpus,
                                     const v1beta1::ContainerPreferredAllocationRequest& request,
                                     v1beta1::ContainerPreferredAllocationResponse* response) = 0;
  // Must fail (never crash, never hand out another pod's devices) on any bad input; the message
  // goes back to the kubelet, which shows it in the pod's events.
  virtual Status Allocate(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                          v1beta1::AllocateResponse* response) = 0;
};

using AllocateFunction = std::function<Status(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                                              v1beta1::AllocateResponse* response)>;

struct UnitResourceSpec {
  std::string resource_name;
  UnitIdStyle style = UnitIdStyle::kUuidDash;
  Placement placement = Placement::kDistinctGpus;
  std::function<int(const GpuInfo&)> units_per_gpu;
  AllocateFunction allocate;
  // Optional: the GPU that GetPreferredAllocation should favour right now ("" = none).
  std::function<std::string()> preferred_gpu;
};

class UnitResource : public ResourcePlugin {
 public:
  explicit UnitResource(UnitResourceSpec spec);
  const std::string& resource_name() const override { return spec_.resource_name; }
  std::string socket_name() const override;
  v1beta1::DevicePluginOptions Options() const override;
  void ListDevices(const std::vector<GpuInfo>& gpus, v1beta1::ListAndWatchResponse* out) const override;
  Status PreferredAllocation(const std::vector<GpuInfo>& gpus, const v1beta1::ContainerPreferredAllocationRequest& request,
                             v1beta1::ContainerPreferredAllocationResponse* response) override;
  Status Allocate(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                  v1beta1::AllocateResponse* response) override;

 private:
  const UnitResourceSpec spec_;
};

// "vgpu-" + the resource name with every character outside [A-Za-z0-9.-] replaced by '_' + ".sock".
std::string SocketNameFor(const std::string& resource_name);

// Size of the ListAndWatch answer for `gpus`, and an error naming the resource when it exceeds
// kMaxListAndWatchBytes.
Status CheckListAndWatchSize(const ResourcePlugin& plugin, const std::vector<GpuInfo>& gpus);

}  // namespace vgpu::k8s
