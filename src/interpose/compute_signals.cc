#include "interpose/compute_signals.h"

#include <algorithm>
#include <map>

#include "interpose/driver_imports.h"
#include "interpose/nvml_types.h"

namespace vgpu::compute_limit {
namespace {

constexpr unsigned kMaxSamples = 512;

}  // namespace

bool NvmlLoadSignals::Resolve() {
  if (device_ != nullptr) return true;
  if (g_nvml.nvmlDeviceGetHandleByUUID == nullptr) return false;
  nvmlDevice_t device = nullptr;
  if (g_nvml.nvmlDeviceGetHandleByUUID(uuid_.c_str(), &device) != NVML_SUCCESS) return false;
  device_ = device;
  return true;
}

double NvmlLoadSignals::ContainerShare(const std::vector<int32_t>& pids, double event_share, int64_t now) {
  if (!per_process_supported_ || g_nvml.nvmlDeviceGetProcessUtilization == nullptr) return event_share;
  // A member, not a thread_local: the library's TLS is initial-exec (static TLS), and 16 KiB of it
  // made dlopen() of libvgpu.so fail ("cannot allocate memory in static TLS block").
  samples_.resize(kMaxSamples);
  nvmlProcessUtilizationSample_t* samples = samples_.data();
  unsigned count = kMaxSamples;
  const nvmlReturn_t rc = g_nvml.nvmlDeviceGetProcessUtilization(static_cast<nvmlDevice_t>(device_), samples,
                                                                 &count, last_seen_us_);
  if (rc == NVML_ERROR_NOT_SUPPORTED) {
    per_process_supported_ = false;
    return event_share;
  }
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_FOUND) return -1;
  if (rc == NVML_ERROR_NOT_FOUND) count = 0;
  // Mean SM utilisation per process over the new samples, summed over the container's processes.
  std::map<int32_t, std::pair<double, int>> per_pid;
  for (unsigned i = 0; i < std::min(count, kMaxSamples); ++i) {
    last_seen_us_ = std::max(last_seen_us_, samples[i].timeStamp);
    const auto pid = static_cast<int32_t>(samples[i].pid);
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) continue;
    auto& [sum, n] = per_pid[pid];
    sum += std::min(samples[i].smUtil, 100u);
    n += 1;
  }
  if (count == 0) {
    // NVML produced nothing new: hold the last figure for a while (its period may exceed ours).
    if (held_share_ >= 0 && now - held_since_ns_ < kHoldNs) return held_share_;
    held_share_ = 0;
    held_since_ns_ = now;
    return 0;
  }
  double share = 0;
  for (const auto& [pid, sum_n] : per_pid) share += sum_n.first / sum_n.second / 100.0;
  held_share_ = std::min(share, 1.0);
  held_since_ns_ = now;
  return held_share_;
}

void NvmlLoadSignals::Sample(const std::vector<int32_t>& pids, double event_share, int64_t now) {
  if (!Resolve()) {
    others_.store(-1, std::memory_order_relaxed);
    device_busy_.store(-1, std::memory_order_relaxed);
    return;
  }
  // NVML's per-process SM utilisation is recorded (debug summary) but not used: on the H200
  // (driver 580) it read well below the device's GPU-Util for the same lone process, so
  // "utilisation - per-process share" saw phantom neighbours and, as a reference, it drove the
  // share up (soft 30/80 alone reached 45, not 80; co-located 30 + 60 ran at 75 + 88).
  container_.store(ContainerShare(pids, event_share, now), std::memory_order_relaxed);
  nvmlUtilization_t utilization{};
  double device = -1;
  if (g_nvml.nvmlDeviceGetUtilizationRates != nullptr &&
      g_nvml.nvmlDeviceGetUtilizationRates(static_cast<nvmlDevice_t>(device_), &utilization) == NVML_SUCCESS) {
    device = std::min(utilization.gpu, 100u) / 100.0;
  }
  device_busy_.store(device, std::memory_order_relaxed);
  others_.store(event_share >= 0 && device >= 0 ? std::max(0.0, device - event_share) : -1.0,
                std::memory_order_relaxed);
}

}  // namespace vgpu::compute_limit
