#include "cli/top.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/config.h"

namespace vgpu::cli {
namespace {

constexpr std::array kTopOptions = {
    OptionSpec{"once", 0, "", "Print one frame and exit (same as --iterations 1)."},
    OptionSpec{"interval", 'n', "SECONDS", "Time between frames, 0.1 or more (default 2)."},
    OptionSpec{"iterations", 0, "N", "Print N frames, then exit (default: until interrupted)."},
    OptionSpec{"local", 0, "", "Do not ask vgpu-node; read only the ledgers found locally."},
    OptionSpec{"socket", 0, "PATH", "vgpu-node's socket (default $VGPU_SOCKET, else /var/lib/vgpu/vgpu.sock)."},
    OptionSpec{"help", 'h', "", "Show this help."},
};

std::string Percent(double fraction) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f%%", fraction * 100.0);
  return buf;
}

// "batch/trainer/main" from a node-view label, else the ledger path.
std::string Name(const PsEntry& e) {
  const std::string prefix = "container ";
  if (e.label.rfind(prefix, 0) != 0) return e.path;
  std::string name = e.label.substr(prefix.size());
  const size_t cut = name.find_first_of(" ,");
  return cut == std::string::npos ? name : name.substr(0, cut);
}

std::string Gpu(const ledger::DeviceUsage& d) {
  std::string text = d.ordinal >= 0 ? std::to_string(d.ordinal) : "#" + std::to_string(d.index);
  if (!d.uuid.empty()) text += " " + d.uuid.substr(0, std::min<size_t>(d.uuid.size(), 12));
  return text;
}

std::string Memory(const ledger::DeviceUsage& d) {
  if (d.memory_limit == 0) return FormatSize(d.used) + " / unlimited";
  return FormatSize(d.used) + " / " + FormatSize(d.memory_limit) + " (" +
         Percent(static_cast<double>(d.used) / static_cast<double>(d.memory_limit)) + ")";
}

// Oversubscription: host memory spilled against the host spill limit.
std::string Spill(const ledger::DeviceUsage& d) {
  if (d.host_limit == 0 && d.spilled == 0) return "-";
  return FormatSize(d.spilled) + " / " + (d.host_limit == 0 ? std::string("none") : FormatSize(d.host_limit));
}

bool AnySpilling(const NodeView& view) {
  for (const PsEntry& e : view.entries) {
    for (const ledger::DeviceUsage& d : e.snapshot.devices) {
      if (d.host_limit != 0 || d.spilled != 0) return true;
    }
  }
  return false;
}

std::string Compute(const ledger::DeviceUsage& d) {
  const std::string share = d.busy_ns == 0 ? "-" : Percent(d.share_ppm / 1e6);
  std::string limit = d.sm_limit == 0 ? "unlimited" : std::to_string(d.sm_limit) + "%";
  if (d.sm_soft_limit != 0) limit += " (soft " + std::to_string(d.sm_soft_limit) + "%)";
  return share + " / " + limit;
}

std::string Now() {
  const time_t t = time(nullptr);
  struct tm tm;
  char buf[32];
  gmtime_r(&t, &tm);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool ParseSeconds(const std::string& text, double* seconds) {
  char* end = nullptr;
  const double v = strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0.1 || v > 86400) return false;
  *seconds = v;
  return true;
}

}  // namespace

std::span<const OptionSpec> TopOptions() { return kTopOptions; }

std::string FormatTopFrame(const NodeView& now, const NodeView* previous, double seconds, const std::string& when) {
  std::string text = "vgpu top - " + (now.from_daemon ? "node " + now.node + " (vgpu-node)" : std::string("local ledgers")) +
                     " - " + when + "\n";
  std::map<std::pair<std::string, int>, uint64_t> throttled_before;
  if (previous != nullptr) {
    for (const PsEntry& e : previous->entries) {
      for (const ledger::DeviceUsage& d : e.snapshot.devices) throttled_before[{e.path, d.index}] = d.throttled_ns;
    }
  }
  std::vector<std::vector<std::string>> rows = {{"CONTAINER", "GPU", "MEMORY USED / LIMIT", "COMPUTE SHARE / LIMIT", "THROTTLED", "PROCS"}};
  // The host spill column only when some container may spill (memory oversubscription).
  const bool spilling = AnySpilling(now);
  if (spilling) rows[0].insert(rows[0].begin() + 3, "HOST SPILL / LIMIT");
  std::vector<std::string> problems;
  for (const PsEntry& e : now.entries) {
    if (!e.ok()) {
      problems.push_back(e.path + ": " + e.error);
      continue;
    }
    const auto live = static_cast<size_t>(std::count_if(e.snapshot.processes.begin(), e.snapshot.processes.end(),
                                                        [](const ledger::ProcessUsage& p) { return p.alive; }));
    if (e.snapshot.devices.empty()) {
      const std::string limit = e.snapshot.default_memory_limit ? FormatSize(e.snapshot.default_memory_limit) : "unlimited";
      rows.push_back({Name(e), "-", "0 B / " + limit, "- / " + (e.snapshot.default_sm_limit ? std::to_string(e.snapshot.default_sm_limit) + "%" : std::string("unlimited")),
                      "-", std::to_string(live)});
      if (spilling) rows.back().insert(rows.back().begin() + 3, "-");
      continue;
    }
    for (const ledger::DeviceUsage& d : e.snapshot.devices) {
      std::string throttled = "-";
      const auto it = throttled_before.find({e.path, d.index});
      if (it != throttled_before.end() && seconds > 0 && d.throttled_ns >= it->second) {
        throttled = Percent(static_cast<double>(d.throttled_ns - it->second) / (seconds * 1e9));
      }
      rows.push_back({Name(e), Gpu(d), Memory(d), Compute(d), throttled, std::to_string(live)});
      if (spilling) rows.back().insert(rows.back().begin() + 3, Spill(d));
    }
  }
  if (rows.size() == 1 && problems.empty()) {
    text += "no vgpu containers or jobs found\n";
  } else if (rows.size() == 1) {
  } else {
    text += FormatColumns(rows, 0);
  }
  for (const std::string& p : problems) text += "unreadable: " + p + "\n";
  if (now.from_daemon) {
    for (const wire::GpuInfo& g : now.gpus) {
      text += "GPU " + std::to_string(g.index) + " " + g.uuid + " " + g.name + ": " + FormatSize(g.memory_used) + " / " +
              FormatSize(g.memory_total) + ", utilization " + std::to_string(g.utilization) + "%, " +
              (g.healthy ? "healthy" : "UNHEALTHY (" + g.health_reason + ")") + "\n";
    }
    for (const wire::BypassInfo& b : now.bypass) {
      text += "BYPASS: host pid " + std::to_string(b.host_pid) + " (" + b.comm + ") in " + b.container_key + " holds " +
              FormatSize(b.memory) + " on " + b.gpu_uuid + " outside vgpu\n";
    }
  }
  return text;
}

int TopMain(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  double interval = 2.0;
  if (const auto v = args.Last("interval"); v && !ParseSeconds(*v, &interval)) {
    err << "vgpu top: invalid --interval \"" << *v << "\": expected seconds, 0.1 or more\n";
    return 2;
  }
  long iterations = -1;
  if (const auto v = args.Last("iterations")) {
    char* end = nullptr;
    iterations = strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0' || iterations < 1) {
      err << "vgpu top: invalid --iterations \"" << *v << "\": expected a number of frames, 1 or more\n";
      return 2;
    }
  }
  if (args.Has("once")) iterations = 1;
  NodeViewOptions options;
  options.local = args.Has("local");
  options.socket = args.Last("socket").value_or("");
  options.operands = args.operands;
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  NodeView previous;
  bool have_previous = false;
  int status = 0;
  for (long frame = 0; iterations < 0 || frame < iterations; ++frame) {
    if (frame > 0) std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval * 1000)));
    NodeView view = CollectNodeView(options);
    if (frame == 0 && !view.note.empty()) err << "vgpu top: " << view.note << "; showing the ledgers found locally\n";
    const std::string text = FormatTopFrame(view, have_previous ? &previous : nullptr, interval, Now());
    if (terminal) {
      out << "\x1b[H\x1b[2J";
    } else if (frame > 0) {
      out << "\n";
    }
    out << text << std::flush;
    status = std::all_of(view.entries.begin(), view.entries.end(), [](const PsEntry& e) { return e.ok(); }) ? 0 : 1;
    previous = std::move(view);
    have_previous = true;
  }
  return status;
}

}  // namespace vgpu::cli
