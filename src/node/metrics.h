// Prometheus text exposition (format 0.0.4) of the node's state. RenderMetrics is a pure
// function of a MetricsSnapshot, so every metric is tested with made-up inputs; the daemon
// assembles the snapshot at scrape time (ledgers are read then, so memory charges show up in
// the next scrape). docs/metrics.md lists every metric, its labels and its meaning; HAMi's
// names are used where HAMi has one (hami_vgpu_memory_used_bytes, ...), with HAMi's labels.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "node/bypass.h"
#include "node/container_store.h"
#include "node/gpu_health.h"
#include "node/gpu_source.h"

namespace vgpu::node {

// Registration latency buckets (seconds), upper bounds.
inline constexpr std::array<double, 10> kLatencyBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                           0.0025, 0.005, 0.01, 0.05, 0.25};

// Lock-free histogram of registration handling time.
class LatencyHistogram {
 public:
  void Observe(int64_t ns);
  struct Values {
    std::array<uint64_t, kLatencyBuckets.size()> cumulative{};
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  Values Read() const;

 private:
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

struct ContainerMetrics {
  ContainerRecord record;
  std::string ledger_error;  // "" = snapshot valid
  ledger::Snapshot snapshot;
  uint32_t live_processes = 0;        // ledger slots whose (host) process is alive
  uint32_t registered_processes = 0;  // in the daemon's registry
  uint32_t bypass_processes = 0;
  std::map<std::string, uint64_t> nvml_memory;  // GPU uuid -> NVML bytes of its known processes
};

struct CounterValues {
  uint64_t registrations_ok = 0;
  uint64_t registrations_refused = 0;
  std::map<std::string, uint64_t> rejects;  // reason -> count (malformed, oversized, timeout, ...)
  uint64_t bypass_detections = 0;
  uint64_t bypass_kills = 0;
  uint64_t containers_removed = 0;
  uint64_t scans = 0;
  double last_scan_seconds = 0;
};

struct MetricsSnapshot {
  std::string node;
  std::string version;
  bool nvml_up = false;
  std::vector<GpuSample> gpus;
  std::vector<GpuHealth> health;
  std::vector<ContainerMetrics> containers;
  std::vector<BypassFinding> bypass;
  CounterValues counters;
  LatencyHistogram::Values latency;
};

std::string RenderMetrics(const MetricsSnapshot& snapshot);

// Label value escaping of the text format (backslash, double quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace vgpu::node
