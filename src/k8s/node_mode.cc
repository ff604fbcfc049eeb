// The Kubernetes plugin as vgpu-node mode modules (node/mode_module.h): modes "hami", "volcano"
// and "standalone". The daemon selects one with `mode = <name>`; the module's options are the
// daemon's dotted keys "<mode>.<key>" with the keys of docs/kubernetes.md (for example
// `hami.split_count = 4`, `volcano.volcano_memory_factor = 64`, `standalone.standalone_preset =
// alnair`). The daemon supplies the rest:
//   node name                 NodeConfig::node_name (unless <mode>.node_name is given)
//   state dir, socket         NodeConfig::state_dir, ContainerDirectory::SocketPath()
//   container directories     ContainerDirectory::Ensure (record + ledger, authority node daemon)
//   GPUs and their health     GpuHealthFeed (inventory, health, change notifications)
#include <mutex>

#include "common/log.h"
#include "k8s/container_store.h"
#include "k8s/k8s_plugin.h"
#include "k8s/node_mode.h"
#include "k8s/pod_resources_client.h"
#include "k8s/standalone_allocator.h"
#include "k8s/standalone_lifetime.h"
#include "node/mode_module.h"

namespace vgpu::k8s {
namespace {

node::Status NodeStatus(const Status& status) {
  return status.ok ? node::Status::Ok() : node::Status::Error(status.message);
}

// ContainerStore over the daemon's container directories.
class DirectoryStore : public ContainerStore {
 public:
  explicit DirectoryStore(node::ContainerDirectory* directory) : directory_(directory) {}
  Status Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) override {
    node::ContainerSpec spec;
    spec.pod_uid = grant.pod_uid;
    spec.container_name = grant.container_name;
    spec.ns = grant.pod_namespace;
    spec.pod_name = grant.pod_name;
    spec.limits = limits;
    node::ContainerRecord record;
    node::Status status = directory_->Ensure(spec, &record);
    if (!status.ok) return Status::Error(status.message);
    if (record.key != grant.key) {
      return Status::Error("the daemon named the container directory " + record.key + ", the grant says " + grant.key);
    }
    return Status::Ok();
  }

 private:
  node::ContainerDirectory* const directory_;
};

class KubernetesMode : public node::ModeModule {
 public:
  explicit KubernetesMode(PluginMode mode) : mode_(mode) {}
  ~KubernetesMode() override { Stop(); }

  node::Status Start(const node::ModeContext& context) override {
    PluginConfig config;
    if (Status status = ConfigFromNode(mode_, context.config, &config); !status.ok) return NodeStatus(status);
    config.paths.socket = context.containers.SocketPath();
    if (context.containers.ContainerLedgerPath() != kContainerLedgerPath) {
      return node::Status::Error(std::string("the Kubernetes modes mount the container directory at ") +
                                 kContainerStateDir + ": container_ledger_path must be " + kContainerLedgerPath +
                                 ", not " + context.containers.ContainerLedgerPath());
    }
    // The plugin logs through vgpu's logger (stderr, like the daemon's); follow the daemon's level.
    SetLogLevel(context.log.Enabled(node::Level::kDebug)  ? LogLevel::kDebug
                : context.log.Enabled(node::Level::kInfo) ? LogLevel::kInfo
                : context.log.Enabled(node::Level::kWarn) ? LogLevel::kWarn
                                                          : LogLevel::kError);
    store_ = std::make_unique<DirectoryStore>(&context.containers);
    const std::vector<GpuInfo> gpus = GpusFromFeed(context.health.Inventory(), context.health.Gpus());
    if (gpus.empty()) {
      context.log.Log(node::Level::kWarn, "k8s", "no GPUs (NVML off or absent): the device plugin advertises none");
    }
    K8sPluginDeps deps;
    deps.store = store_.get();
    Status status;
    plugin_ = K8sPlugin::Create(config, gpus, std::move(deps), &status);
    if (!plugin_) return NodeStatus(status.Context(std::string("mode ") + PluginModeName(mode_)));
    if (status = plugin_->Start(); !status.ok) {
      plugin_.reset();
      return NodeStatus(status.Context(std::string("mode ") + PluginModeName(mode_)));
    }
    if (mode_ == PluginMode::kStandalone) StartReaper(config, context.containers);
    shared_ = std::make_shared<Shared>();
    shared_->plugin = plugin_.get();
    shared_->feed = &context.health;
    feed_ = &context.health;
    // Runs on the daemon's health thread, possibly just after Unsubscribe: it holds `shared`,
    // never `this`, and does nothing once Stop has cleared the plugin.
    subscription_ = feed_->Subscribe([shared = shared_](const node::GpuHealth&) {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (shared->plugin != nullptr) shared->plugin->SetGpus(GpusFromFeed(shared->feed->Inventory(), shared->feed->Gpus()));
    });
    context.log.Log(node::Level::kInfo, "k8s", "device plugin started",
                    {{"mode", PluginModeName(mode_)}, {"node", config.node_name},
                     {"gpus", static_cast<int64_t>(gpus.size())}});
    return node::Status::Ok();
  }

  void Stop() override {
    if (reaper_) reaper_->Stop();
    reaper_.reset();
    if (feed_ != nullptr && subscription_ >= 0) feed_->Unsubscribe(subscription_);
    subscription_ = -1;
    if (shared_) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->plugin = nullptr;
    }
    if (plugin_) plugin_->Stop();
    plugin_.reset();
  }

 private:
  // Standalone grants name no pod: the kubelet's pod resources list says when no container holds
  // a grant's devices any more, and the daemon is told to release it (standalone_lifetime.h).
  void StartReaper(const PluginConfig& config, node::ContainerDirectory& containers) {
    pod_resources_ = std::make_unique<PodResourcesClient>(config.pod_resources_socket);
    StandaloneReaperOptions options;
    options.resources = {config.standalone_memory_resource, config.standalone_compute_resource};
    options.list = [client = pod_resources_.get()](PodResourcesSnapshot* out) { return client->List(out); };
    options.grants = [&containers] {
      std::vector<std::string> uids;
      for (const node::ContainerRecord& record : containers.List()) {
        if (!record.released() && record.error.empty() && record.container_name == kStandaloneContainerName &&
            record.pod_uid.rfind(kStandaloneKeyPrefix, 0) == 0) {
          uids.push_back(record.pod_uid);
        }
      }
      return uids;
    };
    options.release = [&containers](const std::string& uid) {
      node::Status status = containers.Release(ContainerKey(uid, kStandaloneContainerName));
      return status.ok ? Status::Ok() : Status::Error(status.message);
    };
    reaper_ = std::make_unique<StandaloneReaper>(options);
    reaper_->Start();
  }

  struct Shared {
    std::mutex mu;
    K8sPlugin* plugin = nullptr;  // guarded by mu
    node::GpuHealthFeed* feed = nullptr;
  };
  const PluginMode mode_;
  node::GpuHealthFeed* feed_ = nullptr;
  int subscription_ = -1;
  std::unique_ptr<DirectoryStore> store_;
  std::unique_ptr<K8sPlugin> plugin_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<PodResourcesClient> pod_resources_;
  std::unique_ptr<StandaloneReaper> reaper_;
};

}  // namespace

Status ConfigFromNode(PluginMode mode, const node::NodeConfig& node_config, PluginConfig* out) {
  PluginConfig config;
  config.mode = mode;
  config.node_name = node_config.node_name;
  config.paths.state_dir = node_config.state_dir;
  const std::string prefix = std::string(PluginModeName(mode)) + ".";
  for (const auto& [key, value] : node_config.module_options) {
    if (key.rfind(prefix, 0) != 0) continue;  // another module's option
    if (Status status = ApplyPluginSetting(key.substr(prefix.size()), value, &config); !status.ok) {
      return Status::Error("option " + key + ": " + status.message);
    }
  }
  if (config.mode != mode) return Status::Error("option " + prefix + "mode cannot change the mode");
  if (Status status = FinishPluginConfig(getenv, &config); !status.ok) return status;
  *out = std::move(config);
  return Status::Ok();
}

std::vector<GpuInfo> GpusFromFeed(const std::vector<node::GpuSample>& inventory,
                                  const std::vector<node::GpuHealth>& health) {
  std::vector<GpuInfo> gpus;
  for (const node::GpuSample& sample : inventory) {
    if (sample.uuid.empty()) continue;  // a GPU NVML could not describe cannot be advertised
    GpuInfo gpu;
    gpu.uuid = sample.uuid;
    gpu.index = static_cast<int>(sample.index);
    gpu.memory_bytes = sample.memory_total;
    gpu.name = sample.name;
    gpu.healthy = sample.ok;
    for (const node::GpuHealth& state : health) {
      if (state.uuid == sample.uuid || (state.uuid.empty() && state.index == sample.index)) {
        gpu.healthy = gpu.healthy && state.healthy;
      }
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace vgpu::k8s

VGPU_NODE_REGISTER_MODE("hami", "Kubernetes device plugin for HAMi's scheduler extender (docs/kubernetes.md)",
                        [] { return std::make_unique<vgpu::k8s::KubernetesMode>(vgpu::k8s::PluginMode::kHami); });
VGPU_NODE_REGISTER_MODE("volcano", "Kubernetes device plugin for Volcano's deviceshare (docs/kubernetes.md)",
                        [] { return std::make_unique<vgpu::k8s::KubernetesMode>(vgpu::k8s::PluginMode::kVolcano); });
VGPU_NODE_REGISTER_MODE("standalone",
                        "Kubernetes device plugin for the stock scheduler, Alnair-compatible (docs/kubernetes.md)",
                        [] { return std::make_unique<vgpu::k8s::KubernetesMode>(vgpu::k8s::PluginMode::kStandalone); });
