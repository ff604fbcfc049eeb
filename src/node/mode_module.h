// Mode modules: the pluggable part of vgpu-node that talks to an orchestrator (the Kubernetes
// device plugin of issue 7 is one). The daemon owns registration, ledgers, metrics and GPU
// health; a module gets them through the narrow interfaces below and is started/stopped by
// main with the daemon's configuration.
//
// Contract
//   - main creates the module named by the `mode` key (CreateMode), then calls
//     Start(context) once the daemon serves (socket bound, containers rescanned, GPUs opened).
//     A Start error stops the daemon (exit status 1) with the message logged.
//   - Stop() is called once on shutdown (SIGTERM/SIGINT), before the daemon's own services
//     stop; it must return within a few seconds and join the module's threads.
//   - Everything in ModeContext outlives the module (from Start until Stop returns).
//   - Module options are the dotted configuration keys "<mode>.<name>" (NodeConfig::
//     module_options); the module validates them in Start and names any bad key in its error.
//   - Modules run their own threads; the interfaces are thread-safe.
//
// Registering a module: in its .cc file,
//   VGPU_NODE_REGISTER_MODE("k8s", "Kubernetes device plugin", [] { return std::make_unique<MyModule>(); });
// and link the module's OBJECT library into the executable target `vgpu-node`
// (target_link_libraries(vgpu-node PRIVATE my_mode_objects)): object files are always linked,
// so the registration runs (a static library's unreferenced member would be dropped). The
// module's optional dependencies (gRPC, protobuf) belong to its CMake target, found or skipped.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "node/container_store.h"
#include "node/gpu_health.h"
#include "node/gpu_source.h"
#include "node/node_config.h"
#include "node/slog.h"

namespace vgpu::node {

// The ledger-directory manager as a module sees it.
class ContainerDirectory {
 public:
  virtual ~ContainerDirectory() = default;
  // Creates or updates <state_dir>/containers/<pod-uid>_<container>/ (record + ledger with the
  // limits, authority node daemon). Idempotent. Errors name the input.
  virtual Status Ensure(const ContainerSpec& spec, ContainerRecord* out) = 0;
  // The orchestrator says the container is gone: its directory is removed as soon as none of
  // its processes is alive (the daemon's housekeeping decides when).
  virtual Status Release(const std::string& key) = 0;
  virtual std::vector<ContainerRecord> List() const = 0;
  // Host paths to hand to the container runtime (mounts): the registration socket, the
  // container's directory, and the path the container sees its ledger at.
  virtual std::string SocketPath() const = 0;
  virtual std::string ContainerDir(const std::string& key) const = 0;
  virtual std::string ContainerLedgerPath() const = 0;
};

// GPU inventory and health.
class GpuHealthFeed {
 public:
  virtual ~GpuHealthFeed() = default;
  // The GPUs as NVML reports them (index, uuid, name, memory; processes left empty). Empty when
  // the daemon runs without NVML.
  virtual std::vector<GpuSample> Inventory() const = 0;
  virtual std::vector<GpuHealth> Gpus() const = 0;
  // `on_change` is called from the daemon's health thread after a GPU turned unhealthy or
  // recovered (keep it short; no calls back into the feed's Subscribe/Unsubscribe).
  // Returns a token for Unsubscribe.
  virtual int Subscribe(std::function<void(const GpuHealth&)> on_change) = 0;
  virtual void Unsubscribe(int token) = 0;
};

struct ModeContext {
  const NodeConfig& config;
  ContainerDirectory& containers;
  GpuHealthFeed& health;
  Logger& log;
};

class ModeModule {
 public:
  virtual ~ModeModule() = default;
  virtual Status Start(const ModeContext& context) = 0;
  virtual void Stop() = 0;
};

using ModeFactory = std::function<std::unique_ptr<ModeModule>()>;

// Returns true (usable as a static initializer). A second module with the same name is ignored.
bool RegisterMode(const std::string& name, const std::string& summary, ModeFactory factory);
// nullptr when no module has that name.
std::unique_ptr<ModeModule> CreateMode(const std::string& name);
// (name, summary) of every registered module, sorted by name.
std::vector<std::pair<std::string, std::string>> ListModes();

}  // namespace vgpu::node

#define VGPU_NODE_MODE_CONCAT_(a, b) a##b
#define VGPU_NODE_MODE_CONCAT(a, b) VGPU_NODE_MODE_CONCAT_(a, b)
#define VGPU_NODE_REGISTER_MODE(name, summary, factory)                                                  \
  [[maybe_unused]] static const bool VGPU_NODE_MODE_CONCAT(vgpu_node_mode_registered_, __LINE__) = \
      ::vgpu::node::RegisterMode(name, summary, factory)
