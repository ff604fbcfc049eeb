// GPU health from NVML events: a pure state machine (times are passed in).
//
// Unhealthy: an XID critical-error event whose XID is not in the ignored list (by default the
// application-level XIDs 13, 31, 43, 45, 68, 109, as NVIDIA's device plugin skips them), a
// double-bit ECC error, or the GPU reported lost. Single-bit ECC errors are counted only.
// Recovery: an unhealthy GPU becomes healthy again once `recovery_ms` passed since its last
// critical event AND a probe (basic NVML queries) succeeds; a lost GPU stays unhealthy until its
// probe succeeds. Every transition is counted.
//
// Thread safety: not synchronised; the daemon guards it with a mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "node/gpu_source.h"

namespace vgpu::node {

struct GpuHealth {
  uint32_t index = 0;
  std::string uuid;
  bool healthy = true;
  std::string reason;            // why unhealthy ("XID 79", "double-bit ECC error", "lost")
  int64_t last_critical_ms = 0;  // monotonic ms of the last critical event (0 = none)
  std::map<uint64_t, uint64_t> xids;  // XID -> events seen (critical or not)
  uint64_t ecc_single = 0;
  uint64_t ecc_double = 0;
  uint64_t transitions = 0;      // healthy <-> unhealthy changes
};

class HealthTracker {
 public:
  HealthTracker(std::vector<uint32_t> ignored_xids, int64_t recovery_ms);

  // Adds devices not yet known (index -> uuid); keeps what is known.
  void SetDevices(const std::vector<std::pair<uint32_t, std::string>>& devices);
  // Applies an event; true when the device's health changed.
  bool OnEvent(const GpuEvent& event, int64_t now_ms);
  // Recovers devices whose hold time passed and whose probe succeeds; returns the indices that
  // changed.
  std::vector<uint32_t> Tick(int64_t now_ms, const std::function<bool(uint32_t)>& probe);

  std::vector<GpuHealth> Snapshot() const;
  bool IsIgnored(uint64_t xid) const;

 private:
  GpuHealth& Device(uint32_t index);
  void MarkUnhealthy(GpuHealth& d, std::string reason, int64_t now_ms, bool* changed);

  const std::vector<uint32_t> ignored_;
  const int64_t recovery_ms_;
  std::map<uint32_t, GpuHealth> devices_;
  std::map<uint32_t, bool> lost_;
};

}  // namespace vgpu::node
