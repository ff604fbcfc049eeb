#include "node/gpu_health.h"

#include <algorithm>

namespace vgpu::node {

HealthTracker::HealthTracker(std::vector<uint32_t> ignored_xids, int64_t recovery_ms)
    : ignored_(std::move(ignored_xids)), recovery_ms_(recovery_ms) {}

void HealthTracker::SetDevices(const std::vector<std::pair<uint32_t, std::string>>& devices) {
  for (const auto& [index, uuid] : devices) {
    GpuHealth& d = Device(index);
    if (!uuid.empty()) d.uuid = uuid;
  }
}

GpuHealth& HealthTracker::Device(uint32_t index) {
  GpuHealth& d = devices_[index];
  d.index = index;
  return d;
}

bool HealthTracker::IsIgnored(uint64_t xid) const {
  return std::find(ignored_.begin(), ignored_.end(), xid) != ignored_.end();
}

void HealthTracker::MarkUnhealthy(GpuHealth& d, std::string reason, int64_t now_ms, bool* changed) {
  d.last_critical_ms = now_ms;
  d.reason = std::move(reason);
  if (d.healthy) {
    d.healthy = false;
    ++d.transitions;
    *changed = true;
  }
}

bool HealthTracker::OnEvent(const GpuEvent& event, int64_t now_ms) {
  GpuHealth& d = Device(event.index);
  bool changed = false;
  switch (event.kind) {
    case GpuEvent::Kind::kXid:
      ++d.xids[event.data];
      if (!IsIgnored(event.data)) MarkUnhealthy(d, "XID " + std::to_string(event.data), now_ms, &changed);
      break;
    case GpuEvent::Kind::kEccDoubleBit:
      ++d.ecc_double;
      MarkUnhealthy(d, "double-bit ECC error", now_ms, &changed);
      break;
    case GpuEvent::Kind::kEccSingleBit:
      ++d.ecc_single;
      break;
    case GpuEvent::Kind::kLost:
      lost_[event.index] = true;
      MarkUnhealthy(d, "GPU lost (not answering NVML)", now_ms, &changed);
      break;
  }
  return changed;
}

std::vector<uint32_t> HealthTracker::Tick(int64_t now_ms, const std::function<bool(uint32_t)>& probe) {
  std::vector<uint32_t> changed;
  for (auto& [index, d] : devices_) {
    if (d.healthy) continue;
    const bool lost = lost_[index];
    if (!lost && now_ms - d.last_critical_ms < recovery_ms_) continue;
    if (!probe(index)) continue;
    d.healthy = true;
    d.reason.clear();
    ++d.transitions;
    lost_[index] = false;
    changed.push_back(index);
  }
  return changed;
}

std::vector<GpuHealth> HealthTracker::Snapshot() const {
  std::vector<GpuHealth> out;
  for (const auto& [index, d] : devices_) out.push_back(d);
  return out;
}

}  // namespace vgpu::node
