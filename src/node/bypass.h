// Bypass detection: a process that holds GPU memory (NVML's running-process list, host pids)
// inside a limited container's cgroup, but that its container's ledger does not know — a static
// binary, an unset preload, CUDA_DISABLE_CONTROL, a library that never loaded.
//
// A GPU process "belongs" to a container record when its cgroup lies in the record's explicit
// cgroup, or names the record's pod (and lies in the record's pinned cgroup, when pinned). It is
// "known" when the daemon's Registry has it (host pid + start time), or one of its records'
// ledgers has a live slot for it: host_pid + start time (registered through the daemon), or the
// process's innermost pid + start time (the library ran without reaching the daemon). A process
// that belongs to a record and is not known for at least `grace_ms` becomes a finding.
//
// Findings are reported by the caller (metric + one log line per process); with the kill policy
// the caller SIGKILLs the process after re-checking its start time.
//
// Thread safety: not synchronised (the daemon's housekeeping thread owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "node/container_store.h"
#include "node/gpu_source.h"
#include "node/procfs.h"

namespace vgpu::node {

struct BypassFinding {
  int32_t host_pid = 0;
  uint64_t start_time = 0;
  std::string container_key;  // the first matching record
  std::string cgroup;
  std::string comm;
  std::map<std::string, uint64_t> memory;  // GPU uuid -> bytes
  int64_t first_seen_ms = 0;               // monotonic
  uint64_t first_seen_unix = 0;
  bool reported = false;                   // the log line was written (MarkReported)
  bool counted = false;                    // counted in detections_total
};

struct BypassInputs {
  std::vector<GpuSample> gpus;
  std::vector<ContainerRecord> records;
  // Ledger processes per record key (from a read-only snapshot).
  std::map<std::string, std::vector<ledger::ProcessUsage>> ledger_processes;
  std::function<bool(int32_t host_pid, uint64_t start_time)> registered;  // the Registry
  std::function<ProcessFacts(int32_t host_pid)> facts;                   // procfs (full)
};

// Whether a process in `cgroup` belongs to `record`.
bool RecordClaims(const ContainerRecord& record, const std::string& cgroup);

class BypassDetector {
 public:
  explicit BypassDetector(int64_t grace_ms) : grace_ms_(grace_ms) {}

  // Scans once; returns the current findings (processes unknown for >= grace). Processes that
  // became known or vanished are forgotten.
  std::vector<BypassFinding> Scan(const BypassInputs& in, int64_t now_ms, uint64_t now_unix);

  // Marks a finding's log line as written (so it is written once per process).
  void MarkReported(int32_t host_pid, uint64_t start_time);

  uint64_t detections_total() const { return detections_total_; }

 private:
  const int64_t grace_ms_;
  std::map<std::pair<int32_t, uint64_t>, BypassFinding> suspects_;
  uint64_t detections_total_ = 0;
};

}  // namespace vgpu::node
