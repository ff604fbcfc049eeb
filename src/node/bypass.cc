#include "node/bypass.h"

#include <set>

namespace vgpu::node {

bool RecordClaims(const ContainerRecord& record, const std::string& cgroup) {
  if (!record.error.empty() || cgroup.empty()) return false;
  if (!record.cgroup.empty()) return CgroupContains(record.cgroup, cgroup);
  if (!CgroupNamesPod(cgroup, record.pod_uid)) return false;
  return record.pinned_cgroup.empty() || CgroupContains(record.pinned_cgroup, cgroup);
}

std::vector<BypassFinding> BypassDetector::Scan(const BypassInputs& in, int64_t now_ms, uint64_t now_unix) {
  // Every GPU process once, with its memory per GPU.
  std::map<int32_t, std::map<std::string, uint64_t>> gpu_processes;
  for (const GpuSample& gpu : in.gpus) {
    for (const GpuProcessSample& p : gpu.processes) {
      if (p.pid == 0) continue;
      gpu_processes[static_cast<int32_t>(p.pid)][gpu.uuid] += p.used;
    }
  }
  std::set<std::pair<int32_t, uint64_t>> seen;
  for (const auto& [pid, memory] : gpu_processes) {
    const ProcessFacts facts = in.facts(pid);
    if (!facts.exists) continue;
    std::vector<const ContainerRecord*> claimed;
    for (const ContainerRecord& r : in.records) {
      if (RecordClaims(r, facts.cgroup)) claimed.push_back(&r);
    }
    if (claimed.empty()) continue;  // not in a limited container: not our business
    bool known = in.registered && in.registered(pid, facts.start_time);
    for (const ContainerRecord* r : claimed) {
      if (known) break;
      const auto it = in.ledger_processes.find(r->key);
      if (it == in.ledger_processes.end()) continue;
      for (const ledger::ProcessUsage& slot : it->second) {
        const bool same_start = slot.start_time == 0 || slot.start_time == facts.start_time;
        if (same_start && (slot.host_pid == pid || (facts.ns_pid > 0 && slot.pid == facts.ns_pid))) {
          known = true;
          break;
        }
      }
    }
    const std::pair<int32_t, uint64_t> id{pid, facts.start_time};
    if (known) continue;
    seen.insert(id);
    auto [it, inserted] = suspects_.try_emplace(id);
    BypassFinding& f = it->second;
    if (inserted) {
      f.host_pid = pid;
      f.start_time = facts.start_time;
      f.first_seen_ms = now_ms;
      f.first_seen_unix = now_unix;
    }
    f.container_key = claimed.front()->key;
    f.cgroup = facts.cgroup;
    f.comm = facts.comm;
    f.memory = memory;
  }
  std::vector<BypassFinding> findings;
  for (auto it = suspects_.begin(); it != suspects_.end();) {
    if (seen.count(it->first) == 0) {
      it = suspects_.erase(it);
      continue;
    }
    if (now_ms - it->second.first_seen_ms >= grace_ms_) {
      if (!it->second.counted) {  // counted once, when it first qualifies
        it->second.counted = true;
        ++detections_total_;
      }
      findings.push_back(it->second);
    }
    ++it;
  }
  return findings;
}

void BypassDetector::MarkReported(int32_t host_pid, uint64_t start_time) {
  const auto it = suspects_.find({host_pid, start_time});
  if (it != suspects_.end()) it->second.reported = true;
}

}  // namespace vgpu::node
