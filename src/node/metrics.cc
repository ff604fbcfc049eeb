#include "node/metrics.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace vgpu::node {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

std::string Number(uint64_t v) { return std::to_string(v); }

// Accumulates one metric family at a time: HELP and TYPE once, then samples.
class Exposition {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void Sample(const std::string& name, const Labels& labels, const std::string& value) {
    out_ << name;
    if (!labels.empty()) {
      out_ << "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        out_ << (i ? "," : "") << labels[i].first << "=\"" << EscapeLabel(labels[i].second) << "\"";
      }
      out_ << "}";
    }
    out_ << " " << value << "\n";
  }
  void Sample(const std::string& name, const Labels& labels, double v) { Sample(name, labels, Number(v)); }
  void Sample(const std::string& name, const Labels& labels, uint64_t v) { Sample(name, labels, Number(v)); }
  // A family with one sample per item: labels_of(item), value_of(item).
  template <typename Items, typename LabelsOf, typename ValueOf>
  void FamilyOf(const char* name, const char* type, const char* help, const Items& items, LabelsOf labels_of,
                ValueOf value_of) {
    Family(name, type, help);
    for (const auto& item : items) Sample(name, labels_of(item), value_of(item));
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string DeviceType(const GpuSample& g) { return "NVIDIA-" + g.name; }

// HAMi's container labels.
Labels HamiLabels(const ContainerRecord& r, const std::string& vdevice, const std::string& uuid) {
  return {{"namespace", r.ns},
          {"pod", r.pod_name.empty() ? r.pod_uid : r.pod_name},
          {"container", r.container_name},
          {"vdevice_index", vdevice},
          {"device_uuid", uuid}};
}

Labels ContainerLabels(const ContainerRecord& r) {
  return {{"pod_uid", r.pod_uid},
          {"namespace", r.ns},
          {"pod", r.pod_name.empty() ? r.pod_uid : r.pod_name},
          {"container", r.container_name}};
}

Labels DeviceLabels(const ContainerRecord& r, const ledger::DeviceUsage& d) {
  Labels l = ContainerLabels(r);
  l.emplace_back("device_index", std::to_string(d.ordinal >= 0 ? d.ordinal : d.index));
  l.emplace_back("device_uuid", d.uuid);
  return l;
}

std::string VdeviceIndex(const ledger::DeviceUsage& d) { return std::to_string(d.ordinal >= 0 ? d.ordinal : d.index); }

double Ratio(int percent) { return percent / 100.0; }

void RenderGpus(const MetricsSnapshot& s, Exposition& e) {
  auto gpu_labels = [&](const GpuSample& g) {
    return Labels{{"node", s.node}, {"device_index", std::to_string(g.index)}, {"device_uuid", g.uuid}, {"device_type", DeviceType(g)}};
  };
  e.FamilyOf("hami_host_gpu_memory_used_bytes", "gauge", "GPU device memory used, as NVML reports it (HAMi name).", s.gpus, gpu_labels,
             [](const GpuSample& g) { return g.memory_used; });
  e.FamilyOf("hami_host_gpu_utilization_ratio", "gauge", "GPU core utilization in percent, 0-100 (HAMi name and scale).", s.gpus, gpu_labels,
             [](const GpuSample& g) { return static_cast<uint64_t>(g.utilization); });
  e.FamilyOf("vgpu_gpu_memory_total_bytes", "gauge", "GPU device memory, total (NVML).", s.gpus, gpu_labels,
             [](const GpuSample& g) { return g.memory_total; });
  e.FamilyOf("vgpu_gpu_memory_used_bytes", "gauge", "GPU device memory used by all processes (NVML).", s.gpus, gpu_labels,
             [](const GpuSample& g) { return g.memory_used; });
  e.FamilyOf("vgpu_gpu_utilization_ratio", "gauge", "GPU busy fraction over NVML's last sample period, 0..1.", s.gpus, gpu_labels,
             [](const GpuSample& g) { return g.utilization / 100.0; });
  e.FamilyOf("vgpu_gpu_processes", "gauge", "Processes holding memory on the GPU (NVML running processes).", s.gpus, gpu_labels,
             [](const GpuSample& g) { return static_cast<uint64_t>(g.processes.size()); });
  e.FamilyOf("vgpu_gpu_query_ok", "gauge", "1 when the last NVML queries of the GPU succeeded.", s.gpus, gpu_labels,
             [](const GpuSample& g) { return static_cast<uint64_t>(g.ok ? 1 : 0); });

  auto health_labels = [&](const GpuHealth& h) {
    return Labels{{"node", s.node}, {"device_index", std::to_string(h.index)}, {"device_uuid", h.uuid}};
  };
  e.FamilyOf("vgpu_gpu_healthy", "gauge", "1 healthy, 0 unhealthy (critical XID, double-bit ECC, lost); see docs/node.md.", s.health, health_labels,
             [](const GpuHealth& h) { return static_cast<uint64_t>(h.healthy ? 1 : 0); });
  e.FamilyOf("vgpu_gpu_health_transitions_total", "counter", "Healthy/unhealthy changes since the daemon started.", s.health, health_labels,
             [](const GpuHealth& h) { return h.transitions; });
  e.Family("vgpu_gpu_xid_errors_total", "counter", "XID events received since the daemon started, by XID.");
  for (const GpuHealth& h : s.health) {
    for (const auto& [xid, n] : h.xids) {
      Labels l = health_labels(h);
      l.emplace_back("xid", std::to_string(xid));
      e.Sample("vgpu_gpu_xid_errors_total", l, n);
    }
  }
  e.Family("vgpu_gpu_ecc_errors_total", "counter", "ECC error events received since the daemon started.");
  for (const GpuHealth& h : s.health) {
    Labels single = health_labels(h), dbl = health_labels(h);
    single.emplace_back("type", "single_bit");
    dbl.emplace_back("type", "double_bit");
    e.Sample("vgpu_gpu_ecc_errors_total", single, h.ecc_single);
    e.Sample("vgpu_gpu_ecc_errors_total", dbl, h.ecc_double);
  }
}

void RenderContainerDevices(const MetricsSnapshot& s, Exposition& e) {
  struct Row {
    const ContainerMetrics* c;
    const ledger::DeviceUsage* d;
  };
  std::vector<Row> rows;
  for (const ContainerMetrics& c : s.containers) {
    if (!c.ledger_error.empty()) continue;
    for (const ledger::DeviceUsage& d : c.snapshot.devices) rows.push_back({&c, &d});
  }
  auto hami = [](const Row& r) { return HamiLabels(r.c->record, VdeviceIndex(*r.d), r.d->uuid); };
  auto ours = [](const Row& r) { return DeviceLabels(r.c->record, *r.d); };

  e.FamilyOf("hami_vgpu_memory_used_bytes", "gauge", "Container device memory used, from its ledger (HAMi name).", rows, hami,
             [](const Row& r) { return r.d->used; });
  e.FamilyOf("hami_vgpu_memory_limit_bytes", "gauge", "Container device memory limit, 0 = unlimited (HAMi name).", rows, hami,
             [](const Row& r) { return r.d->memory_limit; });
  e.FamilyOf("hami_container_device_memory_bytes", "gauge", "Container device memory usage (HAMi name; same as hami_vgpu_memory_used_bytes).", rows, hami,
             [](const Row& r) { return r.d->used; });
  e.FamilyOf("hami_container_device_utilization_ratio", "gauge", "Container's measured GPU busy share in percent, 0-100 (HAMi name and scale).", rows, hami,
             [](const Row& r) { return r.d->share_ppm / 10000.0; });

  e.FamilyOf("vgpu_container_memory_used_bytes", "gauge", "Device memory charged by the container's live processes (allocations + context overhead).", rows, ours,
             [](const Row& r) { return r.d->used; });
  e.FamilyOf("vgpu_container_memory_limit_bytes", "gauge", "Device memory limit, 0 = unlimited.", rows, ours,
             [](const Row& r) { return r.d->memory_limit; });
  e.FamilyOf("vgpu_container_memory_peak_bytes", "gauge", "Highest charge ever admitted on the device.", rows, ours,
             [](const Row& r) { return r.d->peak; });
  e.Family("vgpu_container_memory_nvml_bytes", "gauge", "NVML per-process usage summed over the container's known processes (the driver's count).");
  for (const Row& r : rows) {
    const auto it = r.c->nvml_memory.find(r.d->uuid);
    e.Sample("vgpu_container_memory_nvml_bytes", ours(r), it == r.c->nvml_memory.end() ? uint64_t{0} : it->second);
  }
  e.FamilyOf("vgpu_container_compute_share_ratio", "gauge", "Measured GPU busy share of the container's kernels (moving average), 0..1.", rows, ours,
             [](const Row& r) { return r.d->share_ppm / 1e6; });
  e.FamilyOf("vgpu_container_compute_limit_ratio", "gauge", "Compute limit, 0..1; 0 = unlimited.", rows, ours,
             [](const Row& r) { return Ratio(r.d->sm_limit); });
  e.FamilyOf("vgpu_container_compute_soft_limit_ratio", "gauge", "Soft compute limit (burst ceiling), 0..1; 0 = none.", rows, ours,
             [](const Row& r) { return Ratio(r.d->sm_soft_limit); });
  e.FamilyOf("vgpu_container_gpu_busy_seconds_total", "counter", "GPU busy time measured for the container's kernels.", rows, ours,
             [](const Row& r) { return r.d->busy_ns / 1e9; });
  e.FamilyOf("vgpu_container_throttled_seconds_total", "counter", "Time the compute limiter held the container's launches back.", rows, ours,
             [](const Row& r) { return r.d->throttled_ns / 1e9; });
  e.FamilyOf("vgpu_container_oom_refusals_total", "counter", "Allocations refused because they would exceed the memory limit.", rows, ours,
             [](const Row& r) { return r.d->oom_refusals; });

  // Oversubscription (docs/memory.md): host memory the container's spilled allocations hold, a
  // budget of its own, never part of the device figures above.
  e.FamilyOf("vgpu_container_spill_used_bytes", "gauge", "Host memory held by the container's spilled allocations (oversubscription); not part of the device memory.", rows, ours,
             [](const Row& r) { return r.d->spilled; });
  e.FamilyOf("vgpu_container_spill_limit_bytes", "gauge", "Host spill limit of the device, 0 = the device does not spill.", rows, ours,
             [](const Row& r) { return r.d->host_limit; });
  e.FamilyOf("vgpu_container_spill_peak_bytes", "gauge", "Highest host spill ever admitted on the device.", rows, ours,
             [](const Row& r) { return r.d->spill_peak; });
  e.FamilyOf("vgpu_container_spill_refusals_total", "counter", "Allocations refused because spilling them would exceed the host spill limit.", rows, ours,
             [](const Row& r) { return r.d->spill_refusals; });
}

void RenderContainers(const MetricsSnapshot& s, Exposition& e) {
  e.Family("vgpu_node_containers", "gauge", "Limited containers (directories under <state_dir>/containers).");
  e.Sample("vgpu_node_containers", {{"node", s.node}}, static_cast<uint64_t>(s.containers.size()));
  e.Family("vgpu_container_info", "gauge", "One per container: identity, ledger path, cgroup and state.");
  for (const ContainerMetrics& c : s.containers) {
    Labels l = ContainerLabels(c.record);
    l.emplace_back("key", c.record.key);
    l.emplace_back("ledger", c.record.LedgerPath());
    l.emplace_back("cgroup", c.record.EffectiveCgroup());
    l.emplace_back("state", !c.record.error.empty() ? "error" : c.record.released() ? "released" : "active");
    e.Sample("vgpu_container_info", l, uint64_t{1});
  }
  e.Family("vgpu_container_ledger_ok", "gauge", "1 when the container's record and ledger could be read.");
  for (const ContainerMetrics& c : s.containers) {
    e.Sample("vgpu_container_ledger_ok", ContainerLabels(c.record), static_cast<uint64_t>(c.ledger_error.empty() ? 1 : 0));
  }
  e.Family("vgpu_container_processes", "gauge", "Live processes in the container's ledger.");
  for (const ContainerMetrics& c : s.containers) e.Sample("vgpu_container_processes", ContainerLabels(c.record), static_cast<uint64_t>(c.live_processes));
  e.Family("vgpu_container_registered_processes", "gauge", "Live processes that registered with the daemon.");
  for (const ContainerMetrics& c : s.containers) {
    e.Sample("vgpu_container_registered_processes", ContainerLabels(c.record), static_cast<uint64_t>(c.registered_processes));
  }
  e.Family("vgpu_container_bypass_processes", "gauge", "GPU processes in the container's cgroup that its ledger does not know (bypass).");
  for (const ContainerMetrics& c : s.containers) {
    e.Sample("vgpu_container_bypass_processes", ContainerLabels(c.record), static_cast<uint64_t>(c.bypass_processes));
  }
}

void RenderNode(const MetricsSnapshot& s, Exposition& e) {
  e.Family("vgpu_node_info", "gauge", "The daemon: version and node name.");
  e.Sample("vgpu_node_info", {{"node", s.node}, {"version", s.version}}, uint64_t{1});
  e.Family("vgpu_nvml_up", "gauge", "1 when NVML was loaded and initialised.");
  e.Sample("vgpu_nvml_up", {{"node", s.node}}, static_cast<uint64_t>(s.nvml_up ? 1 : 0));
  e.Family("vgpu_bypass_processes", "gauge", "GPU processes inside limited containers that bypass vgpu (all containers).");
  e.Sample("vgpu_bypass_processes", {{"node", s.node}}, static_cast<uint64_t>(s.bypass.size()));
  e.Family("vgpu_bypass_process_info", "gauge", "One per bypassing process: host pid, command, container, memory in the value.");
  for (const BypassFinding& f : s.bypass) {
    uint64_t memory = 0;
    for (const auto& [uuid, bytes] : f.memory) memory += bytes;
    e.Sample("vgpu_bypass_process_info",
             {{"host_pid", std::to_string(f.host_pid)}, {"comm", f.comm}, {"container", f.container_key}, {"cgroup", f.cgroup}},
             memory);
  }
  e.Family("vgpu_bypass_detections_total", "counter", "Processes found bypassing vgpu since the daemon started.");
  e.Sample("vgpu_bypass_detections_total", {}, s.counters.bypass_detections);
  e.Family("vgpu_bypass_kills_total", "counter", "Bypassing processes killed (bypass_action = kill).");
  e.Sample("vgpu_bypass_kills_total", {}, s.counters.bypass_kills);
  e.Family("vgpu_registrations_total", "counter", "Registration requests answered, by result.");
  e.Sample("vgpu_registrations_total", {{"result", "ok"}}, s.counters.registrations_ok);
  e.Sample("vgpu_registrations_total", {{"result", "refused"}}, s.counters.registrations_refused);
  e.Family("vgpu_registration_rejects_total", "counter", "Connections or frames rejected before a decision, by reason.");
  for (const char* reason : {"bad_frame", "oversized", "malformed", "unsupported_version", "unsupported_type", "timeout",
                             "too_many_connections", "peer_closed", "not_permitted"}) {
    const auto it = s.counters.rejects.find(reason);
    e.Sample("vgpu_registration_rejects_total", {{"reason", reason}}, it == s.counters.rejects.end() ? uint64_t{0} : it->second);
  }
  e.Family("vgpu_registration_duration_seconds", "histogram", "Time the daemon spent deciding a registration.");
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    e.Sample("vgpu_registration_duration_seconds_bucket", {{"le", Number(kLatencyBuckets[i])}}, s.latency.cumulative[i]);
  }
  e.Sample("vgpu_registration_duration_seconds_bucket", {{"le", "+Inf"}}, s.latency.count);
  e.Sample("vgpu_registration_duration_seconds_sum", {}, s.latency.sum_seconds);
  e.Sample("vgpu_registration_duration_seconds_count", {}, s.latency.count);
  e.Family("vgpu_containers_removed_total", "counter", "Container directories removed because the container was gone.");
  e.Sample("vgpu_containers_removed_total", {}, s.counters.containers_removed);
  e.Family("vgpu_housekeeping_scans_total", "counter", "Housekeeping scans run.");
  e.Sample("vgpu_housekeeping_scans_total", {}, s.counters.scans);
  e.Family("vgpu_housekeeping_last_duration_seconds", "gauge", "Duration of the last housekeeping scan.");
  e.Sample("vgpu_housekeeping_last_duration_seconds", {}, s.counters.last_scan_seconds);
}

}  // namespace

void LatencyHistogram::Observe(int64_t ns) {
  const double seconds = static_cast<double>(ns) / 1e9;
  size_t i = 0;
  while (i < kLatencyBuckets.size() && seconds > kLatencyBuckets[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns > 0 ? ns : 0), std::memory_order_relaxed);
}

LatencyHistogram::Values LatencyHistogram::Read() const {
  Values v;
  uint64_t running = 0;
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    v.cumulative[i] = running;
  }
  running += buckets_[kLatencyBuckets.size()].load(std::memory_order_relaxed);
  v.count = running;  // consistent with the buckets even while observations race
  v.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return v;
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string RenderMetrics(const MetricsSnapshot& s) {
  Exposition e;
  RenderGpus(s, e);
  RenderContainerDevices(s, e);
  RenderContainers(s, e);
  RenderNode(s, e);
  return e.str();
}

}  // namespace vgpu::node
