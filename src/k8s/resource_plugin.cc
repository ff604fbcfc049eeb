#include "k8s/resource_plugin.h"

namespace vgpu::k8s {

std::string SocketNameFor(const std::string& resource_name) {
  std::string name = "vgpu-";
  for (char c : resource_name) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    name += keep ? c : '_';
  }
  return name + ".sock";
}

UnitResource::UnitResource(UnitResourceSpec spec) : spec_(std::move(spec)) {}

std::string UnitResource::socket_name() const { return SocketNameFor(spec_.resource_name); }

v1beta1::DevicePluginOptions UnitResource::Options() const {
  v1beta1::DevicePluginOptions options;
  options.set_pre_start_required(false);
  options.set_get_preferred_allocation_available(true);
  return options;
}

void UnitResource::ListDevices(const std::vector<GpuInfo>& gpus, v1beta1::ListAndWatchResponse* out) const {
  out->clear_devices();
  for (const GpuInfo& gpu : gpus) {
    const int units = spec_.units_per_gpu(gpu);
    for (int n = 0; n < units; ++n) {
      v1beta1::Device* device = out->add_devices();
      device->set_id(UnitId(spec_.style, gpu, n));
      device->set_health(gpu.healthy ? kHealthy : kUnhealthy);
      if (gpu.numa_node >= 0) device->mutable_topology()->add_nodes()->set_id(gpu.numa_node);
    }
  }
}

Status UnitResource::PreferredAllocation(const std::vector<GpuInfo>& gpus,
                                         const v1beta1::ContainerPreferredAllocationRequest& request,
                                         v1beta1::ContainerPreferredAllocationResponse* response) {
  if (request.allocation_size() < 0) return Status::Error("negative allocation_size");
  std::vector<std::string> available(request.available_deviceids().begin(), request.available_deviceids().end());
  std::vector<std::string> must(request.must_include_deviceids().begin(), request.must_include_deviceids().end());
  const std::string preferred = spec_.preferred_gpu ? spec_.preferred_gpu() : std::string();
  for (const std::string& id :
       PreferredUnits(spec_.style, spec_.placement, gpus, available, must, request.allocation_size(), preferred)) {
    response->add_deviceids(id);
  }
  return Status::Ok();
}

Status UnitResource::Allocate(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                              v1beta1::AllocateResponse* response) {
  return spec_.allocate(gpus, request, response);
}

Status CheckListAndWatchSize(const ResourcePlugin& plugin, const std::vector<GpuInfo>& gpus) {
  v1beta1::ListAndWatchResponse list;
  plugin.ListDevices(gpus, &list);
  const size_t bytes = list.ByteSizeLong();
  if (bytes <= kMaxListAndWatchBytes) return Status::Ok();
  return Status::Error(plugin.resource_name() + ": " + std::to_string(list.devices_size()) +
                       " devices make a ListAndWatch message of " + std::to_string(bytes) +
                       " bytes, above gRPC's 4 MiB limit; use fewer, larger units");
}

}  // namespace vgpu::k8s
