#include "k8s/k8s_plugin.h"

#include <cmath>

#include "k8s/inventory.h"
#include "k8s/kubelet_registrar.h"
#include "k8s/node_reporter.h"
#include "k8s/resource_plugin.h"
#include "k8s/scheduler_allocator.h"
#include "k8s/standalone_allocator.h"

namespace vgpu::k8s {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

int64_t MemoryMiB(const GpuInfo& gpu) { return static_cast<int64_t>(gpu.memory_bytes / kMiB); }

std::vector<NodeGpuRecord> Records(const std::vector<GpuInfo>& gpus, const PluginConfig& config, bool volcano) {
  std::vector<NodeGpuRecord> records;
  for (const GpuInfo& gpu : gpus) {
    NodeGpuRecord record;
    record.uuid = gpu.uuid;
    record.index = gpu.index;
    record.count = config.split_count;
    record.memory = volcano ? MemoryMiB(gpu) / config.volcano_memory_factor
                            : static_cast<int64_t>(std::floor(static_cast<double>(MemoryMiB(gpu)) * config.memory_scaling));
    record.cores = 100;
    record.type = std::string("NVIDIA-") + gpu.name;
    record.numa = gpu.numa_node < 0 ? 0 : gpu.numa_node;
    record.mode = kHamiCoreMode;
    record.healthy = gpu.healthy;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace

struct K8sPlugin::Parts {
  PluginConfig config;
  Inventory inventory;
  std::unique_ptr<KubeApi> api;
  std::unique_ptr<ContainerStore> own_store;
  ContainerStore* store = nullptr;
  std::unique_ptr<SchedulerAllocator> scheduler;
  std::unique_ptr<StandaloneAllocator> standalone;
  std::vector<std::unique_ptr<ResourcePlugin>> resources;
  std::vector<std::unique_ptr<PluginEndpoint>> endpoints;
  std::unique_ptr<KubeletRegistrar> registrar;
  std::unique_ptr<NodeReporter> reporter;
};

std::unique_ptr<K8sPlugin> K8sPlugin::Create(const PluginConfig& config, std::vector<GpuInfo> gpus, K8sPluginDeps deps,
                                             Status* status) {
  auto parts = std::make_unique<Parts>();
  parts->config = config;
  parts->inventory.Set(gpus);
  if (deps.store != nullptr) {
    parts->store = deps.store;
  } else {
    parts->own_store = std::make_unique<LedgerDirectoryStore>(config.paths.state_dir + "/containers");
    parts->store = parts->own_store.get();
  }
  Parts* p = parts.get();
  const int split = config.split_count;
  auto empty_responses = [](const std::vector<GpuInfo>&, const v1beta1::AllocateRequest& request,
                            v1beta1::AllocateResponse* response) {
    // Memory and cores of Volcano are counted by the kubelet only; the vGPU comes with vgpu-number.
    for (int i = 0; i < request.container_requests_size(); ++i) response->add_container_responses();
    return Status::Ok();
  };

  switch (config.mode) {
    case PluginMode::kOff:
      *status = Status::Error("the Kubernetes mode is off");
      return nullptr;
    case PluginMode::kHami:
    case PluginMode::kVolcano: {
      const bool volcano = config.mode == PluginMode::kVolcano;
      if (deps.api) {
        parts->api = std::move(deps.api);
      } else {
        Status created;
        parts->api = HttpKubeApi::Create(config.api, &created);
        if (!parts->api) {
          *status = created;
          return nullptr;
        }
      }
      SchedulerAllocatorOptions options;
      options.protocol = volcano ? &kVolcanoProtocol : &kHamiProtocol;
      options.node_name = config.node_name;
      options.paths = config.paths;
      options.memory_factor = volcano ? config.volcano_memory_factor : 1;
      options.update_attempts = config.update_attempts;
      parts->scheduler = std::make_unique<SchedulerAllocator>(options, parts->api.get(), parts->store);
      UnitResourceSpec number;
      number.resource_name = volcano ? config.volcano_number_resource : config.hami_resource;
      number.style = UnitIdStyle::kUuidDash;
      number.placement = Placement::kDistinctGpus;
      number.units_per_gpu = [split](const GpuInfo&) { return split; };
      number.allocate = [p](const std::vector<GpuInfo>& g, const v1beta1::AllocateRequest& r, v1beta1::AllocateResponse* out) {
        return p->scheduler->Allocate(g, r, out);
      };
      parts->resources.push_back(std::make_unique<UnitResource>(number));
      if (volcano) {
        const int factor = config.volcano_memory_factor;
        UnitResourceSpec memory;
        memory.resource_name = config.volcano_memory_resource;
        memory.style = UnitIdStyle::kIndexDash;
        memory.placement = Placement::kSameGpu;
        memory.units_per_gpu = [factor](const GpuInfo& gpu) { return static_cast<int>(MemoryMiB(gpu) / factor); };
        memory.allocate = empty_responses;
        parts->resources.push_back(std::make_unique<UnitResource>(memory));
        UnitResourceSpec cores;
        cores.resource_name = config.volcano_cores_resource;
        cores.style = UnitIdStyle::kIndexDash;
        cores.placement = Placement::kSameGpu;
        cores.units_per_gpu = [](const GpuInfo&) { return 100; };
        cores.allocate = empty_responses;
        parts->resources.push_back(std::make_unique<UnitResource>(cores));
      }
      NodeReporterOptions reporter;
      reporter.protocol = options.protocol;
      reporter.node_name = config.node_name;
      reporter.interval = std::chrono::seconds(config.register_interval_s);
      reporter.encode = [config, volcano](const std::vector<GpuInfo>& g) {
        return volcano ? EncodeVolcanoNodeRegister(Records(g, config, true)) : EncodeHamiNodeRegister(Records(g, config, false));
      };
      parts->reporter = std::make_unique<NodeReporter>(reporter, parts->api.get(), &parts->inventory);
      break;
    }
    case PluginMode::kStandalone: {
      StandaloneOptions options;
      options.paths = config.paths;
      options.pairing_window = std::chrono::milliseconds(config.pairing_window_ms);
      parts->standalone = std::make_unique<StandaloneAllocator>(options, parts->store);
      for (StandaloneKind kind : {StandaloneKind::kMemory, StandaloneKind::kCompute}) {
        UnitResourceSpec spec;
        spec.resource_name = kind == StandaloneKind::kMemory ? config.standalone_memory_resource
                                                             : config.standalone_compute_resource;
        spec.style = UnitIdStyle::kUuidUnderscore;
        spec.placement = Placement::kSameGpu;
        spec.units_per_gpu = [kind](const GpuInfo& gpu) { return StandaloneUnits(kind, gpu); };
        spec.allocate = [p, kind](const std::vector<GpuInfo>& g, const v1beta1::AllocateRequest& r,
                                  v1beta1::AllocateResponse* out) { return p->standalone->Allocate(kind, g, r, out); };
        spec.preferred_gpu = [p, kind] { return p->standalone->PreferredGpu(kind); };
        parts->resources.push_back(std::make_unique<UnitResource>(spec));
      }
      break;
    }
  }
  for (const auto& resource : parts->resources) {
    if (Status size = CheckListAndWatchSize(*resource, gpus); !size.ok) {
      *status = Status::Error(size.message + (config.mode == PluginMode::kVolcano ? " (raise volcano_memory_factor)" : ""));
      return nullptr;
    }
    parts->endpoints.push_back(std::make_unique<PluginEndpoint>(resource.get(), &parts->inventory, config.device_plugin_dir));
  }
  std::vector<PluginEndpoint*> endpoints;
  for (const auto& endpoint : parts->endpoints) endpoints.push_back(endpoint.get());
  KubeletRegistrarOptions registrar;
  registrar.directory = config.device_plugin_dir;
  parts->registrar = std::make_unique<KubeletRegistrar>(registrar, endpoints);
  *status = Status::Ok();
  return std::unique_ptr<K8sPlugin>(new K8sPlugin(std::move(parts)));
}

K8sPlugin::K8sPlugin(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

K8sPlugin::~K8sPlugin() { Stop(); }

Status K8sPlugin::Start() {
  if (Status status = parts_->registrar->Start(); !status.ok) return status;
  if (parts_->reporter) parts_->reporter->Start();
  return Status::Ok();
}

void K8sPlugin::Stop() {
  if (parts_->reporter) parts_->reporter->Stop();
  parts_->inventory.Shutdown();
  parts_->registrar->Stop();
}

void K8sPlugin::SetGpus(std::vector<GpuInfo> gpus) { parts_->inventory.Set(std::move(gpus)); }

int K8sPlugin::registrations() const { return parts_->registrar->registrations(); }

}  // namespace vgpu::k8s
