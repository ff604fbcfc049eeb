// vgpu-node's core: wires the registration socket, the container directories, NVML, health,
// bypass detection, housekeeping and the metrics endpoint together. main.cc only parses the
// configuration, handles signals and starts the mode module with this object's interfaces.
//
// Threads (all joined by Stop):
//   registration   SocketServer's threads: decode, decide (Registrar), answer;
//   metrics        HttpServer's thread: /metrics and /healthz, snapshot assembled per scrape
//                  (ledgers read then, so a charge is visible at the next scrape);
//   housekeeping   every scan_interval: rescan container directories, prune dead
//                  registrations, bypass detection (+ kill policy), removal of containers that
//                  are gone and have no live process;
//   health         NVML event wait (XID/ECC) and recovery probes; notifies subscribers.
//
// State kept on disk only (rebuilt by Start after a restart): container records and ledgers;
// the registry of registered processes is rebuilt from the ledgers' live slots (host pids).
//
// Thread safety: the public methods may be called from any thread after Start.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node/bypass.h"
#include "node/container_store.h"
#include "node/gpu_health.h"
#include "node/gpu_source.h"
#include "node/http_server.h"
#include "node/metrics.h"
#include "node/mode_module.h"
#include "node/node_config.h"
#include "node/procfs.h"
#include "node/registrar.h"
#include "node/slog.h"
#include "node/socket_server.h"

namespace vgpu::node {

class Daemon : public ContainerDirectory, public GpuHealthFeed {
 public:
  // `gpu_source` may be null (then NVML is opened from config.nvml_library unless "off").
  Daemon(NodeConfig config, Logger& log, std::unique_ptr<GpuSource> gpu_source = nullptr);
  ~Daemon() override;

  Status Start();
  void Stop();

  // One housekeeping pass now (also runs every scan_interval). For SIGHUP and tests.
  void ScanNow();

  // The reply frame for a request frame (what the socket threads call).
  std::string HandleFrame(const PeerCred& peer, const wire::FrameHeader& header, std::string_view payload);
  std::string RenderMetricsNow();
  wire::QueryReply Query();

  const std::string& metrics_address() const { return http_.bound_address(); }
  const NodeConfig& config() const { return config_; }

  // ContainerDirectory
  Status Ensure(const ContainerSpec& spec, ContainerRecord* out) override;
  Status Release(const std::string& key) override;
  std::vector<ContainerRecord> List() const override;
  std::string SocketPath() const override { return config_.SocketPath(); }
  std::string ContainerDir(const std::string& key) const override { return config_.ContainersDir() + "/" + key; }
  std::string ContainerLedgerPath() const override { return config_.container_ledger_path; }

  // GpuHealthFeed
  std::vector<GpuSample> Inventory() const override;
  std::vector<GpuHealth> Gpus() const override;
  int Subscribe(std::function<void(const GpuHealth&)> on_change) override;
  void Unsubscribe(int token) override;

 private:
  struct LedgerView {
    std::string error;
    ledger::Snapshot snapshot;
  };

  // Creates (or checks) the node-wide compute board at config_.BoardPath().
  Status CreateBoard();
  void HousekeepingLoop();
  void HealthLoop();
  void Scan();
  LedgerView ReadLedger(const ContainerRecord& record) const;
  bool ContainerGone(const ContainerRecord& record, uint64_t now_unix) const;
  void RebuildRegistry();
  void Notify(const std::vector<uint32_t>& changed);
  void CountReject(const char* reason);
  std::string HandleRegister(const PeerCred& peer, std::string_view payload);
  std::string HandleQuery(const PeerCred& peer);
  void WriteReadyFile();

  const NodeConfig config_;
  Logger& log_;
  ProcFs procfs_;
  ContainerStore store_;
  Registry registry_;
  Registrar registrar_;
  std::unique_ptr<GpuSource> gpus_;  // null without NVML
  std::vector<GpuSample> inventory_;  // guarded by mu_ (from the last sample, without processes)

  mutable std::mutex health_mu_;
  HealthTracker health_;  // guarded by health_mu_
  std::map<int, std::function<void(const GpuHealth&)>> subscribers_;  // guarded by health_mu_
  int next_token_ = 1;                                                 // guarded by health_mu_

  mutable std::mutex mu_;                     // scan results
  std::vector<BypassFinding> findings_;       // guarded by mu_
  BypassDetector detector_;                   // used by the housekeeping thread only (under scan_mu_)
  std::mutex scan_mu_;                        // one scan at a time

  std::atomic<uint64_t> registrations_ok_{0};
  std::atomic<uint64_t> registrations_refused_{0};
  std::atomic<uint64_t> bypass_kills_{0};
  std::atomic<uint64_t> bypass_detections_{0};
  std::atomic<uint64_t> containers_removed_{0};
  std::atomic<uint64_t> scans_{0};
  std::atomic<int64_t> last_scan_ns_{0};
  std::mutex rejects_mu_;
  std::map<std::string, uint64_t> rejects_;  // guarded by rejects_mu_
  LatencyHistogram latency_;

  std::unique_ptr<SocketServer> server_;
  HttpServer http_;
  std::thread housekeeping_;
  std::thread health_thread_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_
  bool started_ = false;
};

}  // namespace vgpu::node
