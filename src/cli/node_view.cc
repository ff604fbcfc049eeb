#include "cli/node_view.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/config.h"
#include "protocol/wire_transport.h"

namespace vgpu::cli {
namespace {

constexpr char kDefaultStateDir[] = "/var/lib/vgpu";

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string Normal(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

// Processes of node-daemon ledgers: liveness by host pid.
void FixLiveness(std::vector<PsEntry>* entries) {
  for (PsEntry& e : *entries) {
    if (!e.ok() || e.snapshot.authority != ledger::Authority::kNodeDaemon) continue;
    for (ledger::ProcessUsage& p : e.snapshot.processes) p.alive = ledger::IsProcessAlive(p.host_pid, p.start_time);
  }
}

std::string Label(const wire::ContainerInfo& c) {
  std::string who = c.ns.empty() ? "" : c.ns + "/";
  who += (c.pod_name.empty() ? c.pod_uid : c.pod_name) + "/" + c.container_name;
  std::string label = "container " + who;
  if (!c.pod_name.empty()) label += " (pod uid " + c.pod_uid + ")";
  label += ", " + std::to_string(c.registered) + " registered";
  if (c.state != "active") label += ", " + c.state;
  return label;
}

}  // namespace

std::string DefaultNodeSocket() {
  const char* s = getenv("VGPU_SOCKET");
  return s != nullptr && s[0] == '/' ? s : std::string(kDefaultStateDir) + "/vgpu.sock";
}

NodeView CollectNodeView(const NodeViewOptions& options) {
  NodeView view;
  view.socket = options.socket.empty() ? DefaultNodeSocket() : options.socket;
  view.search = LedgerSearchFromProcess(options.operands);
  std::vector<std::string> paths;
  std::vector<std::string> labels;
  if (options.operands.empty() && !options.local && Exists(view.socket)) {
    const std::string frame = wire::EncodeFrame(wire::MessageType::kQueryRequest, "");
    const wire::ExchangeResult x = wire::Exchange(view.socket, frame, options.timeout_ms, wire::kMaxReplyPayload);
    wire::QueryReply reply;
    if (!x.ok()) {
      view.note = x.error;
    } else if (const std::string other = wire::VersionMismatch(x.header, "vgpu"); !other.empty()) {
      view.note = "vgpu-node at " + view.socket + " " + other;
    } else if (x.header.type == wire::MessageType::kErrorReply) {
      wire::ErrorReply e;
      wire::DecodeErrorReply(x.payload, &e);
      view.note = "vgpu-node at " + view.socket + " refused the query: " + e.message;
    } else if (x.header.type != wire::MessageType::kQueryReply || !wire::DecodeQueryReply(x.payload, &reply).empty()) {
      view.note = "vgpu-node at " + view.socket + " sent an unreadable reply";
    } else {
      view.from_daemon = true;
      view.node = reply.node;
      view.gpus = reply.gpus;
      view.bypass = reply.bypass;
      for (const wire::ContainerInfo& c : reply.containers) {
        paths.push_back(c.ledger_path);
        labels.push_back(Label(c));
      }
    }
  }
  if (!view.from_daemon && options.operands.empty()) {
    const std::string containers = std::string(kDefaultStateDir) + "/containers";
    if (Exists(containers)) {
      view.search.ledger_dirs += (view.search.ledger_dirs.empty() ? "" : ":") + containers;
    }
  }
  // Then every ledger found locally that the daemon did not list.
  std::set<std::string> seen;
  for (const std::string& p : paths) seen.insert(Normal(p));
  for (const std::string& p : FindLedgerPaths(view.search)) {
    if (seen.insert(Normal(p)).second) {
      paths.push_back(p);
      labels.push_back("");
    }
  }
  view.entries = ReadLedgers(paths);
  for (size_t i = 0; i < view.entries.size(); ++i) view.entries[i].label = labels[i];
  FixLiveness(&view.entries);
  return view;
}

std::string FormatNodeTables(const NodeView& view) {
  if (!view.from_daemon) return "";
  std::string text = "\nnode " + view.node + " (vgpu-node at " + view.socket + ")\n";
  if (view.gpus.empty()) {
    text += "  no GPU data (the daemon runs without NVML)\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"GPU", "UUID", "NAME", "MEMORY USED / TOTAL", "UTIL", "HEALTH"}};
    for (const wire::GpuInfo& g : view.gpus) {
      rows.push_back({std::to_string(g.index), g.uuid, g.name, FormatSize(g.memory_used) + " / " + FormatSize(g.memory_total),
                      std::to_string(g.utilization) + "%", g.healthy ? "healthy" : "UNHEALTHY: " + g.health_reason});
    }
    text += FormatColumns(rows, 2);
  }
  if (view.bypass.empty()) {
    text += "  no GPU process bypasses vgpu in a limited container\n";
  } else {
    text += "  GPU processes in limited containers that bypass vgpu (not in their ledger):\n";
    std::vector<std::vector<std::string>> rows = {{"HOST PID", "COMMAND", "CONTAINER", "GPU", "MEMORY"}};
    for (const wire::BypassInfo& b : view.bypass) {
      rows.push_back({std::to_string(b.host_pid), b.comm, b.container_key, b.gpu_uuid, FormatSize(b.memory)});
    }
    text += FormatColumns(rows, 2);
  }
  return text;
}

std::string FormatNodeJsonMembers(const NodeView& view) {
  if (!view.from_daemon) return "";
  std::ostringstream json;
  json << "\"node\": " << JsonString(view.node) << ", \"gpus\": [";
  for (size_t i = 0; i < view.gpus.size(); ++i) {
    const wire::GpuInfo& g = view.gpus[i];
    json << (i ? ", " : "") << "{\"index\": " << g.index << ", \"uuid\": " << JsonString(g.uuid) << ", \"name\": " << JsonString(g.name)
         << ", \"memory_total\": " << g.memory_total << ", \"memory_used\": " << g.memory_used << ", \"utilization\": " << g.utilization
         << ", \"healthy\": " << (g.healthy ? "true" : "false") << ", \"health_reason\": " << JsonString(g.health_reason) << "}";
  }
  json << "], \"bypass\": [";
  for (size_t i = 0; i < view.bypass.size(); ++i) {
    const wire::BypassInfo& b = view.bypass[i];
    json << (i ? ", " : "") << "{\"host_pid\": " << b.host_pid << ", \"comm\": " << JsonString(b.comm)
         << ", \"container\": " << JsonString(b.container_key) << ", \"gpus\": " << JsonString(b.gpu_uuid)
         << ", \"memory\": " << b.memory << ", \"first_seen_unix\": " << b.first_seen_unix << "}";
  }
  json << "], ";
  return json.str();
}

}  // namespace vgpu::cli
