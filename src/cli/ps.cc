#include "cli/ps.h"

#include <cstdio>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>
#include <sstream>

#include "cli/node_view.h"
#include "common/config.h"

namespace vgpu::cli {
namespace {

namespace fs = std::filesystem;
using ledger::DeviceUsage;
using ledger::ProcessUsage;
using ledger::Snapshot;

constexpr std::array kPsOptions = {
    OptionSpec{"json", 0, "", "Print JSON instead of tables (for scripts and monitoring)."},
    OptionSpec{"local", 0, "", "Do not ask vgpu-node; read only the ledgers found locally."},
    OptionSpec{"socket", 0, "PATH", "vgpu-node's socket (default $VGPU_SOCKET, else /var/lib/vgpu/vgpu.sock)."},
    OptionSpec{"help", 'h', "", "Show this help."},
};

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// <dir>/<prefix>*/ledger for every entry of `dir` whose name starts with `prefix`.
void AddChildLedgers(const std::string& dir, const std::string& prefix, std::vector<std::string>* found) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string candidate = it->path().string() + "/ledger";
    if (Exists(candidate)) found->push_back(candidate);
  }
}

void AddSearchDirectory(const std::string& dir, std::vector<std::string>* found) {
  if (Exists(dir + "/ledger")) found->push_back(dir + "/ledger");
  AddChildLedgers(dir, "", found);
}

// The places searched when no PATH is given.
void SearchDefaultPlaces(const LedgerSearch& search, std::vector<std::string>* found_out) {
  std::vector<std::string>& found = *found_out;
  if (!search.uid_root.empty()) {
    if (Exists(search.uid_root + "/ledger")) found.push_back(search.uid_root + "/ledger");
    AddChildLedgers(search.uid_root, "run-", &found);
  }
  if (!search.xdg_runtime_dir.empty()) AddChildLedgers(search.xdg_runtime_dir + "/vgpu", "run-", &found);
  std::istringstream dirs(search.ledger_dirs);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty()) AddSearchDirectory(dir, &found);
  }
}

std::string Normal(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

// Device charges (allocations + overhead), then spilled host memory when there is any.
std::string Cell(uint64_t charged, uint64_t overhead, uint64_t spilled) {
  std::string text = overhead == 0 ? FormatSize(charged) : FormatSize(charged) + " + " + FormatSize(overhead);
  if (spilled != 0) text += ", host " + FormatSize(spilled);
  return text;
}

// Oversubscription columns are shown only for ledgers that use it.
bool AnySpilling(const Snapshot& snapshot) {
  return std::any_of(snapshot.devices.begin(), snapshot.devices.end(),
                     [](const DeviceUsage& d) { return d.host_limit != 0 || d.spilled != 0; });
}

std::string Host(const DeviceUsage& device) {
  if (device.host_limit == 0 && device.spilled == 0) return "-";
  return FormatSize(device.spilled) + " / " + (device.host_limit == 0 ? "none" : FormatSize(device.host_limit));
}

std::string Memory(uint64_t bytes) { return bytes == 0 ? "unlimited" : FormatSize(bytes); }

std::string Compute(int sm_limit, int sm_soft_limit) {
  std::string text = sm_limit == 0 ? "unlimited" : std::to_string(sm_limit) + "%";
  if (sm_soft_limit != 0) text += " (soft " + std::to_string(sm_soft_limit) + "%)";
  return text;
}

// The measured busy share against the limit, e.g. "29.8% of 30%"; "-" before any measurement.
std::string Share(const DeviceUsage& device) {
  if (device.busy_ns == 0) return "-";
  char text[48];
  snprintf(text, sizeof(text), "%.1f%%", device.share_ppm / 10000.0);
  return text;
}

std::string UtcTime(uint64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000);
  struct tm tm;
  char buf[32];
  if (gmtime_r(&seconds, &tm) == nullptr || strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return "?";
  return buf;
}

std::string DeviceTable(const Snapshot& snapshot) {
  if (snapshot.devices.empty()) return "  no devices yet (a process binds them when it first uses a GPU)\n";
  std::vector<std::vector<std::string>> rows = {{"DEVICE", "ORDINAL", "UUID", "USED / LIMIT", "PEAK", "REFUSALS", "COMPUTE", "SHARE"}};
  const bool spilling = AnySpilling(snapshot);
  if (spilling) rows[0].insert(rows[0].begin() + 4, "HOST / LIMIT");
  for (const DeviceUsage& device : snapshot.devices) {
    rows.push_back({std::to_string(device.index), device.ordinal < 0 ? "-" : std::to_string(device.ordinal),
                    device.uuid.empty() ? "-" : device.uuid,
                    FormatSize(device.used) + " / " + Memory(device.memory_limit), FormatSize(device.peak),
                    std::to_string(device.oom_refusals), Compute(device.sm_limit, device.sm_soft_limit),
                    Share(device)});
    if (spilling) rows.back().insert(rows.back().begin() + 4, Host(device));
  }
  return FormatColumns(rows, 2);
}

std::string ProcessTable(const Snapshot& snapshot) {
  if (snapshot.processes.empty()) return "  no processes\n";
  std::vector<std::string> header = {"PID", "HOST PID", "STATE"};
  for (const DeviceUsage& device : snapshot.devices) header.push_back("DEVICE " + std::to_string(device.index));
  std::vector<std::vector<std::string>> rows = {header};
  for (const ProcessUsage& process : snapshot.processes) {
    std::vector<std::string> row = {std::to_string(process.pid), std::to_string(process.host_pid),
                                    process.alive      ? "running"
                                    : process.draining ? "exited (its memory still held by the driver)"
                                                       : "exited (not yet reclaimed)"};
    for (const DeviceUsage& device : snapshot.devices) {
      row.push_back(Cell(process.charged[device.index], process.overhead[device.index], process.spilled[device.index]));
    }
    rows.push_back(row);
  }
  return FormatColumns(rows, 2);
}

void JsonDevices(const Snapshot& snapshot, std::ostringstream& json) {
  json << "\"devices\": [";
  for (size_t i = 0; i < snapshot.devices.size(); ++i) {
    const DeviceUsage& d = snapshot.devices[i];
    json << (i ? ", " : "") << "{\"index\": " << d.index << ", \"ordinal\": " << d.ordinal
         << ", \"uuid\": " << JsonString(d.uuid) << ", \"memory_limit\": " << d.memory_limit
         << ", \"used\": " << d.used << ", \"peak\": " << d.peak << ", \"oom_refusals\": " << d.oom_refusals
         << ", \"sm_limit\": " << d.sm_limit << ", \"sm_soft_limit\": " << d.sm_soft_limit
         << ", \"share_ppm\": " << d.share_ppm << ", \"busy_ns\": " << d.busy_ns
         << ", \"throttled_ns\": " << d.throttled_ns << ", \"host_limit\": " << d.host_limit
         << ", \"spilled\": " << d.spilled << ", \"spill_peak\": " << d.spill_peak
         << ", \"spill_refusals\": " << d.spill_refusals << "}";
  }
  json << "]";
}

void JsonProcesses(const Snapshot& snapshot, std::ostringstream& json) {
  json << "\"processes\": [";
  for (size_t i = 0; i < snapshot.processes.size(); ++i) {
    const ProcessUsage& p = snapshot.processes[i];
    json << (i ? ", " : "") << "{\"pid\": " << p.pid << ", \"host_pid\": " << p.host_pid
         << ", \"start_time\": " << p.start_time << ", \"alive\": " << (p.alive ? "true" : "false")
         << ", \"draining\": " << (p.draining ? "true" : "false") << ", \"devices\": [";
    for (size_t j = 0; j < snapshot.devices.size(); ++j) {
      const int index = snapshot.devices[j].index;
      json << (j ? ", " : "") << "{\"index\": " << index << ", \"charged\": " << p.charged[index]
           << ", \"overhead\": " << p.overhead[index] << ", \"spilled\": " << p.spilled[index] << "}";
    }
    json << "]}";
  }
  json << "]";
}

}  // namespace

std::span<const OptionSpec> PsOptions() { return kPsOptions; }

LedgerSearch LedgerSearchFromProcess(std::vector<std::string> operands) {
  LedgerSearch search;
  search.uid_root = "/tmp/vgpu-" + std::to_string(geteuid());
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') search.xdg_runtime_dir = xdg;
  const char* dirs = getenv("VGPU_LEDGER_DIRS");
  if (dirs != nullptr) search.ledger_dirs = dirs;
  search.operands = std::move(operands);
  return search;
}

std::vector<std::string> FindLedgerPaths(const LedgerSearch& search) {
  std::vector<std::string> found;
  if (search.operands.empty()) SearchDefaultPlaces(search, &found);
  std::vector<std::string> explicit_paths;
  for (const std::string& operand : search.operands) {
    if (IsDirectory(operand)) {
      AddSearchDirectory(operand, &found);
    } else {
      explicit_paths.push_back(operand);
    }
  }
  std::sort(found.begin(), found.end());
  found.insert(found.end(), explicit_paths.begin(), explicit_paths.end());
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const std::string& path : found) {
    if (seen.insert(Normal(path)).second) unique.push_back(path);
  }
  return unique;
}

std::vector<PsEntry> ReadLedgers(const std::vector<std::string>& paths) {
  std::vector<PsEntry> entries;
  for (const std::string& path : paths) {
    PsEntry entry;
    entry.path = path;
    ledger::LedgerStatus status;
    const std::unique_ptr<ledger::Ledger> opened = ledger::Ledger::OpenReadOnly(path, &status);
    if (opened == nullptr) {
      entry.error = status.message;
    } else {
      entry.snapshot = opened->Read();
      if (!opened->Health().ok) entry.error = opened->Health().message;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::string FormatColumns(const std::vector<std::vector<std::string>>& rows, size_t indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line(indent, ' ');
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    text += line + "\n";
  }
  return text;
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string FormatPsTable(const std::vector<PsEntry>& entries) {
  std::string text;
  for (const PsEntry& entry : entries) {
    if (!text.empty()) text += "\n";
    text += entry.path + (entry.label.empty() ? "" : "  [" + entry.label + "]") + "\n";
    if (!entry.ok()) {
      text += "  error: " + entry.error + "\n";
      continue;
    }
    const Snapshot& s = entry.snapshot;
    text += "  limits by " + std::string(ledger::AuthorityName(s.authority)) + ", created " + UtcTime(s.created_unix_ns) +
            "; priority " + std::to_string(s.task_priority);
    if (s.lock_recoveries != 0) text += "; " + std::to_string(s.lock_recoveries) + " lock recoveries";
    text += "\n  default per GPU: memory " + Memory(s.default_memory_limit) + ", compute " +
            Compute(s.default_sm_limit, s.default_sm_soft_limit);
    if (s.default_host_limit != 0) text += ", host spill " + FormatSize(s.default_host_limit);
    text += "\n" + DeviceTable(s) + ProcessTable(s);
  }
  return text;
}

std::string FormatPsJson(const std::vector<PsEntry>& entries, const std::string& members) {
  std::ostringstream json;
  json << "{" << members << "\"ledgers\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const PsEntry& entry = entries[i];
    json << (i ? ",\n  " : "\n  ") << "{\"path\": " << JsonString(entry.path) << ", \"ok\": " << (entry.ok() ? "true" : "false");
    if (!entry.label.empty()) json << ", \"label\": " << JsonString(entry.label);
    if (!entry.ok()) {
      json << ", \"error\": " << JsonString(entry.error) << "}";
      continue;
    }
    const Snapshot& s = entry.snapshot;
    json << ", \"authority\": " << JsonString(ledger::AuthorityName(s.authority)) << ", \"task_priority\": " << s.task_priority
         << ", \"created_unix_ns\": " << s.created_unix_ns << ", \"lock_recoveries\": " << s.lock_recoveries
         << ", \"reclaimed_processes\": " << s.reclaimed_processes << ", \"default_memory_limit\": " << s.default_memory_limit
         << ", \"default_sm_limit\": " << s.default_sm_limit << ", \"default_sm_soft_limit\": " << s.default_sm_soft_limit
         << ", \"default_host_limit\": " << s.default_host_limit << ", ";
    JsonDevices(s, json);
    json << ", ";
    JsonProcesses(s, json);
    json << "}";
  }
  json << (entries.empty() ? "]}\n" : "\n]}\n");
  return json.str();
}

int PsMain(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  NodeViewOptions options;
  options.local = args.Has("local");
  options.socket = args.Last("socket").value_or("");
  options.operands = args.operands;
  const NodeView view = CollectNodeView(options);
  const LedgerSearch& search = view.search;
  const std::vector<PsEntry>& entries = view.entries;
  if (!view.note.empty()) err << "vgpu ps: " << view.note << "; showing the ledgers found locally\n";
  if (args.Has("json")) {
    out << FormatPsJson(entries, FormatNodeJsonMembers(view));
  } else if (entries.empty()) {
    out << "no ledgers found (searched " << search.uid_root << "/ledger, " << search.uid_root << "/run-*/ledger"
        << (search.xdg_runtime_dir.empty() ? "" : ", " + search.xdg_runtime_dir + "/vgpu/run-*/ledger")
        << (search.ledger_dirs.empty() ? "" : " and $VGPU_LEDGER_DIRS") << ")\n";
    out << FormatNodeTables(view);
  } else {
    out << FormatPsTable(entries) << FormatNodeTables(view);
  }
  const bool all_ok = std::all_of(entries.begin(), entries.end(), [](const PsEntry& e) { return e.ok(); });
  if (!all_ok) err << "vgpu ps: some ledgers could not be read (listed with their error)\n";
  return all_ok ? 0 : 1;
}

}  // namespace vgpu::cli
