// compute::LoadSignals from NVML, for one GPU: how busy OTHER containers keep it (soft limit),
// and this container's share as NVML measures it (the controller's reference under contention).
//
// Sample() makes the NVML calls (milliseconds each at worst) and caches the results; it is
// called only by the compute monitor thread (compute_limit.cc), about every 100 ms. The
// LoadSignals getters, called by the controller from launching threads, only load the cache.
//
//   container share  sum over the container's processes (host pids from the ledger) of NVML's
//                    per-process SM utilisation (nvmlDeviceGetProcessUtilization), averaged over
//                    the samples NVML produced since the last call; held while NVML produced
//                    none for at most kHoldNs (its sampling period can exceed ours), then 0.
//                    When the driver does not support per-process utilisation, the container's
//                    event-measured share (passed in) stands in.
//   OthersBusy       max(0, device utilisation (nvmlDeviceGetUtilizationRates) - container share).
//   ReferenceShare   the container share, but only while others keep the GPU busy (>= 10%): that
//                    is when the event measurement is biased (another context's time slices
//                    count as this container's busy time). Alone, events are exact: -1 (none).
// Any NVML failure makes the affected signal unknown (-1): the controller then stays at the hard
// limit (never bursts on a guess) and regulates the event-measured share.
//
// Thread safety: Sample from one thread at a time; the getters from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "compute/controller.h"

namespace vgpu::compute_limit {

class NvmlLoadSignals final : public compute::LoadSignals {
 public:
  static constexpr int64_t kHoldNs = 1'000'000'000;
  static constexpr double kOthersBusyForReference = 0.10;

  explicit NvmlLoadSignals(std::string uuid) : uuid_(std::move(uuid)) {}

  // `pids`: the container's processes as NVML sees them (host pids). `event_share`: the
  // container's event-measured share (0..1), used when per-process utilisation is unsupported.
  void Sample(const std::vector<int32_t>& pids, double event_share, int64_t now);

  double OthersBusy(int64_t) override { return others_.load(std::memory_order_relaxed); }
  double ReferenceShare(int64_t) override { return reference_.load(std::memory_order_relaxed); }

  // Last container share NVML reported (0..1), -1 when unknown; for the debug summary.
  double container_share() const { return container_.load(std::memory_order_relaxed); }

 private:
  bool Resolve();
  double ContainerShare(const std::vector<int32_t>& pids, double event_share, int64_t now);

  const std::string uuid_;
  void* device_ = nullptr;              // nvmlDevice_t, resolved on first Sample
  bool per_process_supported_ = true;
  unsigned long long last_seen_us_ = 0; // newest NVML sample timestamp processed
  double held_share_ = -1;
  int64_t held_since_ns_ = 0;
  std::atomic<double> others_{-1};
  std::atomic<double> reference_{-1};
  std::atomic<double> container_{-1};
};

}  // namespace vgpu::compute_limit
