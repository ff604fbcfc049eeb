// compute::LoadSignals from NVML, for one GPU: how busy OTHER containers keep it (soft limit),
// and this container's share as NVML sees it (debug only, see below).
//
// Sample() makes the NVML calls (milliseconds each at worst) and caches the results; it is
// called only by the compute monitor thread (compute_limit.cc), about every 100 ms. The
// LoadSignals getters, called by the controller from launching threads, only load the cache.
//
//   OthersBusy       max(0, device utilisation (nvmlDeviceGetUtilizationRates) - the container's
//                    event-measured share). Both are time shares of the same GPU.
//   device_busy      the device utilisation itself, for Controller::Unbound (light measurement).
//   ReferenceShare   none (-1): NVML's per-process SM utilisation (nvmlDeviceGetProcessUtilization,
//                    summed over the container's host pids from the ledger) is sampled for the debug
//                    summary only. On the H200 it read well below the device utilisation for a lone
//                    process, so it is not a time share comparable with ours (docs/compute.md).
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
#include "interpose/nvml_types.h"

namespace vgpu::compute_limit {

class NvmlLoadSignals final : public compute::LoadSignals {
 public:
  static constexpr int64_t kHoldNs = 1'000'000'000;

  explicit NvmlLoadSignals(std::string uuid) : uuid_(std::move(uuid)) {}

  // `pids`: the container's processes as NVML sees them (host pids). `event_share`: the
  // container's event-measured share (0..1), used when per-process utilisation is unsupported.
  void Sample(const std::vector<int32_t>& pids, double event_share, int64_t now);

  double OthersBusy(int64_t) override { return others_.load(std::memory_order_relaxed); }
  double ReferenceShare(int64_t) override { return -1; }  // none: see above

  // Last container share NVML reported (0..1), -1 when unknown; for the debug summary.
  double container_share() const { return container_.load(std::memory_order_relaxed); }
  // The whole GPU's utilisation at the last sample (nvmlDeviceGetUtilizationRates, 0..1), -1 when
  // unknown: an upper bound of the container's share (Controller::Unbound).
  double device_busy() const { return device_busy_.load(std::memory_order_relaxed); }

 private:
  bool Resolve();
  double ContainerShare(const std::vector<int32_t>& pids, double event_share, int64_t now);

  const std::string uuid_;
  void* device_ = nullptr;              // nvmlDevice_t, resolved on first Sample
  bool per_process_supported_ = true;
  unsigned long long last_seen_us_ = 0; // newest NVML sample timestamp processed
  double held_share_ = -1;
  std::vector<nvmlProcessUtilizationSample_t> samples_;  // NVML's answer buffer
  int64_t held_since_ns_ = 0;
  std::atomic<double> others_{-1};
  std::atomic<double> container_{-1};
  std::atomic<double> device_busy_{-1};
};

}  // namespace vgpu::compute_limit
