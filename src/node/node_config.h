// Configuration of vgpu-node: one table of keys, three sources.
//
// Precedence (highest first): command-line flags, environment (VGPU_NODE_<KEY>), the config
// file, built-in defaults. The config file is --config PATH, else $VGPU_NODE_CONFIG, else
// /etc/vgpu/node.conf when it exists (a missing default file is not an error; a missing named
// one is). File syntax: `key = value` lines, '#' comments, blank lines; values may be quoted
// with "...". Flags: `--key=value` or `--key value`, '-' and '_' interchangeable in keys.
//
// Keys containing a dot (`k8s.resource_name`) are options of a mode module (mode_module.h): they
// are accepted from the file and flags without validation here and handed to the module, which
// validates its own. Every other unknown key, and every malformed value, is an error naming the
// key, the value and where it came from; nothing falls back to a default silently.
//
// Thread safety: pure functions; NodeConfig is a plain value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "node/slog.h"

namespace vgpu::node {

enum class BypassAction { kReport, kKill };

struct NodeConfig {
  std::string state_dir = "/var/lib/vgpu";
  std::string socket;  // "" = <state_dir>/vgpu.sock
  uint32_t socket_mode = 0666;
  std::string container_ledger_path = "/var/lib/vgpu/container/ledger";
  std::string metrics_listen = ":9394";  // host:port, ":port" (all addresses) or "off"
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string nvml_library = "libnvidia-ml.so.1";  // "off" = no NVML (no GPU data)
  int64_t scan_interval_ms = 2000;
  int64_t request_timeout_ms = 1000;
  int max_connections = 1024;
  int server_threads = 4;
  BypassAction bypass_action = BypassAction::kReport;
  int64_t bypass_grace_ms = 2000;
  int64_t orphan_grace_ms = 600'000;
  std::vector<uint32_t> health_ignored_xids = {13, 31, 43, 45, 68, 109};
  int64_t health_recovery_ms = 60'000;
  std::string mode = "none";
  Level log_level = Level::kInfo;
  LogFormat log_format = LogFormat::kLogfmt;
  std::string node_name;   // "" = $NODE_NAME, else the host name (filled by the loader)
  std::string ready_file;  // written once the daemon serves (socket, metrics address, pid)
  std::map<std::string, std::string> module_options;  // dotted keys

  std::string SocketPath() const { return socket.empty() ? state_dir + "/vgpu.sock" : socket; }
  std::string ContainersDir() const { return state_dir + "/containers"; }
  // The node-wide compute board (ledger/board.h), shared by every container on the node.
  std::string BoardPath() const { return state_dir + "/board"; }
};

// One configuration key: its name, help text and the default as text.
struct ConfigKey {
  const char* name;
  const char* value_help;  // e.g. "DURATION"
  const char* help;
};
const std::vector<ConfigKey>& ConfigKeys();

// Where a value came from.
enum class Source { kDefault, kFile, kEnvironment, kFlag };
const char* SourceName(Source source);

struct ConfigLoad {
  NodeConfig config;
  std::map<std::string, Source> sources;  // key -> where its value came from (defaults omitted)
  std::string config_file;                // the file read, "" if none
  std::vector<std::string> errors;        // empty = ok
  bool help = false;                      // --help was given
  bool print_config = false;              // --print-config was given
  std::vector<std::string> operands;      // non-option arguments, in order
  bool ok() const { return errors.empty(); }
};

// Loads flags (args without the program name), environment and file.
// `read_file(path, &text)` returns false when the file does not exist / cannot be read (then
// *text holds the reason). `env(name)` returns nullptr when unset.
ConfigLoad LoadConfig(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env,
                      const std::function<bool(const std::string&, std::string*)>& read_file);

// The effective configuration, one `key = value  # source` line per key (for --print-config).
std::string DescribeConfig(const ConfigLoad& load);

std::string HelpText();

}  // namespace vgpu::node
