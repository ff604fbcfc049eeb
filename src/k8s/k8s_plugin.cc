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

namespace {

Status EmptyResponses(const std::vector<GpuInfo>&, const v1beta1::AllocateRequest& request,
                      v1beta1::AllocateResponse* response) {
  // Volcano's memory and cores are counted by the kubelet only; the vGPU comes with vgpu-number.
  for (int i = 0; i < request.container_requests_size(); ++i) response->add_container_responses();
  return Status::Ok();
}

UnitResourceSpec Spec(std::string name, UnitIdStyle style, Placement placement,
                      std::function<int(const GpuInfo&)> units, AllocateFunction allocate) {
  UnitResourceSpec spec;
  spec.resource_name = std::move(name);
  spec.style = style;
  spec.placement = placement;
  spec.units_per_gpu = std::move(units);
  spec.allocate = std::move(allocate);
  return spec;
}

}  // namespace

// hami / volcano: the scheduler allocator, its resources, the node reporter.
Status K8sPlugin::AssembleSchedulerMode(Parts* p, std::unique_ptr<KubeApi> api) {
  const PluginConfig& config = p->config;
  const bool volcano = config.mode == PluginMode::kVolcano;
  if (api) {
    p->api = std::move(api);
  } else {
    Status created;
    p->api = HttpKubeApi::Create(config.api, &created);
    if (!p->api) return created;
  }
  SchedulerAllocatorOptions options;
  options.protocol = volcano ? &kVolcanoProtocol : &kHamiProtocol;
  options.node_name = config.node_name;
  options.paths = config.paths;
  options.memory_factor = volcano ? config.volcano_memory_factor : 1;
  options.update_attempts = config.update_attempts;
  p->scheduler = std::make_unique<SchedulerAllocator>(options, p->api.get(), p->store);
  const int split = config.split_count;
  p->resources.push_back(std::make_unique<UnitResource>(Spec(
      volcano ? config.volcano_number_resource : config.hami_resource, UnitIdStyle::kUuidDash,
      Placement::kDistinctGpus, [split](const GpuInfo&) { return split; },
      [p](const std::vector<GpuInfo>& g, const v1beta1::AllocateRequest& r, v1beta1::AllocateResponse* out) {
        return p->scheduler->Allocate(g, r, out);
      })));
  if (volcano) {
    const int factor = config.volcano_memory_factor;
    p->resources.push_back(std::make_unique<UnitResource>(
        Spec(config.volcano_memory_resource, UnitIdStyle::kIndexDash, Placement::kSameGpu,
             [factor](const GpuInfo& gpu) { return static_cast<int>(MemoryMiB(gpu) / factor); }, EmptyResponses)));
    p->resources.push_back(std::make_unique<UnitResource>(Spec(config.volcano_cores_resource, UnitIdStyle::kIndexDash,
                                                               Placement::kSameGpu,
                                                               [](const GpuInfo&) { return 100; }, EmptyResponses)));
  }
  NodeReporterOptions reporter;
  reporter.protocol = options.protocol;
  reporter.node_name = config.node_name;
  reporter.interval = std::chrono::seconds(config.register_interval_s);
  reporter.encode = [config, volcano](const std::vector<GpuInfo>& g) {
    return volcano ? EncodeVolcanoNodeRegister(Records(g, config, true)) : EncodeHamiNodeRegister(Records(g, config, false));
  };
  p->reporter = std::make_unique<NodeReporter>(reporter, p->api.get(), &p->inventory);
  return Status::Ok();
}

// standalone: memory and compute units, joined by the standalone allocator.
void K8sPlugin::AssembleStandaloneMode(Parts* p) {
  const PluginConfig& config = p->config;
  StandaloneOptions options;
  options.paths = config.paths;
  options.pairing_window = std::chrono::milliseconds(config.pairing_window_ms);
  options.memory_resource = config.standalone_memory_resource;
  options.compute_resource = config.standalone_compute_resource;
  p->standalone = std::make_unique<StandaloneAllocator>(options, p->store);
  for (StandaloneKind kind : {StandaloneKind::kMemory, StandaloneKind::kCompute}) {
    UnitResourceSpec spec = Spec(
        kind == StandaloneKind::kMemory ? config.standalone_memory_resource : config.standalone_compute_resource,
        UnitIdStyle::kUuidUnderscore, Placement::kSameGpu,
        [kind](const GpuInfo& gpu) { return StandaloneUnits(kind, gpu); },
        [p, kind](const std::vector<GpuInfo>& g, const v1beta1::AllocateRequest& r, v1beta1::AllocateResponse* out) {
          return p->standalone->Allocate(kind, g, r, out);
        });
    spec.preferred_gpu = [p, kind] { return p->standalone->PreferredGpu(kind); };
    p->resources.push_back(std::make_unique<UnitResource>(spec));
  }
}

std::unique_ptr<K8sPlugin> K8sPlugin::Create(const PluginConfig& config, std::vector<GpuInfo> gpus, K8sPluginDeps deps,
                                             Status* status) {
  if (config.mode == PluginMode::kOff) {
    *status = Status::Error("the Kubernetes mode is off");
    return nullptr;
  }
  auto parts = std::make_unique<Parts>();
  parts->config = config;
  parts->inventory.Set(gpus);
  if (deps.store != nullptr) {
    parts->store = deps.store;
  } else {
    parts->own_store = std::make_unique<LedgerDirectoryStore>(config.paths.state_dir + "/containers");
    parts->store = parts->own_store.get();
  }
  if (config.mode == PluginMode::kStandalone) {
    AssembleStandaloneMode(parts.get());
  } else if (Status assembled = AssembleSchedulerMode(parts.get(), std::move(deps.api)); !assembled.ok) {
    *status = assembled;
    return nullptr;
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
  // Requests to the API server in flight (the reporter's, an Allocate's) would otherwise hold
  // the stop for up to their timeout. The reporter is told first, so that a request it sees
  // cancelled reads as its stop, not as a failure to warn about.
  if (parts_->reporter) parts_->reporter->BeginStop();
  if (parts_->api) parts_->api->CancelAll();
  if (parts_->reporter) parts_->reporter->Stop();
  parts_->inventory.Shutdown();
  parts_->registrar->Stop();
}

void K8sPlugin::SetGpus(std::vector<GpuInfo> gpus) { parts_->inventory.Set(std::move(gpus)); }

int K8sPlugin::registrations() const { return parts_->registrar->registrations(); }

}  // namespace vgpu::k8s
