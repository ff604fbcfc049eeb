// NodeReporter: keeps the node's device registration current for a scheduler (HAMi or Volcano).
//
// It patches two node annotations — the device list (<register>) and "Reported <time>"
// (<handshake>) — at start, every `interval`, whenever the GPU inventory changes (health), and
// whenever the scheduler asks (it writes "Requesting_<time>" into the handshake and drops the node
// if no report follows within about a minute). The node is watched for that; a broken watch is
// reopened after a short pause. The patches overwrite only these two keys (a merge patch without
// resourceVersion: the node owns them, there is nothing to merge).
//
// Thread safety: Start/Stop from one thread; the reporter runs two threads of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "k8s/inventory.h"
#include "k8s/kube_api.h"
#include "k8s/scheduler_protocol.h"

namespace vgpu::k8s {

struct NodeReporterOptions {
  const SchedulerProtocol* protocol = &kHamiProtocol;
  std::string node_name;
  std::chrono::milliseconds interval{30000};
  std::chrono::milliseconds retry{2000};  // after a failed report or a broken watch
  int watch_timeout_seconds = 300;
  // The <register> value for the current GPUs.
  std::function<std::string(const std::vector<GpuInfo>&)> encode;
};

class NodeReporter {
 public:
  // `api` and `inventory` must outlive the reporter.
  NodeReporter(NodeReporterOptions options, KubeApi* api, Inventory* inventory);
  ~NodeReporter();

  void Start();
  // Tells the threads to end (a request in flight still runs to its end); Stop() also joins them.
  void BeginStop();
  void Stop();

  // Reports once now (also used by the thread). Errors name the node and the API answer.
  Status ReportNow();
  int reports() const { return reports_.load(); }

 private:
  void ReportLoop();
  void WatchLoop();
  void RequestReport();

  const NodeReporterOptions options_;
  KubeApi* const api_;
  Inventory* const inventory_;
  std::atomic<bool> stop_{false};
  std::atomic<int> reports_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool requested_ = false;  // guarded by mu_
  std::thread report_thread_;
  std::thread watch_thread_;
};

}  // namespace vgpu::k8s
