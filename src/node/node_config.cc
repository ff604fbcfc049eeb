#include "node/node_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "common/config.h"

namespace vgpu::node {
namespace {

const std::vector<ConfigKey> kKeys = {
    {"state_dir", "DIR", "Host directory of the daemon's state: the socket, containers/<key>/{record,ledger}. Default /var/lib/vgpu."},
    {"socket", "PATH", "Registration socket. Default <state_dir>/vgpu.sock."},
    {"socket_mode", "OCTAL", "Mode of the socket file. Default 0666 (identity comes from SO_PEERCRED and the cgroup)."},
    {"container_ledger_path", "PATH", "Where a container sees its ledger (the mount target). Default /var/lib/vgpu/container/ledger."},
    {"metrics_listen", "ADDR", "Prometheus endpoint, host:port or :port; \"off\" disables it. Default :9394."},
    {"proc_root", "DIR", "Where /proc is (tests point it at a fake tree). Default /proc."},
    {"cgroup_root", "DIR", "Where the cgroup filesystem is mounted. Default /sys/fs/cgroup."},
    {"nvml_library", "NAME", "NVML to dlopen; \"off\" runs without GPU data. Default libnvidia-ml.so.1."},
    {"scan_interval", "DURATION", "Housekeeping period: container scan, bypass detection, removal. Default 2s."},
    {"request_timeout", "DURATION", "A client must send its whole request within this. Default 1s."},
    {"max_connections", "N", "Open registration connections at most; more are closed at once. Default 1024."},
    {"server_threads", "N", "Threads serving the registration socket (1..64). Default 4."},
    {"bypass_action", "report|kill", "What to do with a GPU process in a limited container that is not in its ledger. Default report."},
    {"bypass_grace", "DURATION", "How long such a process must stay unregistered before it is reported. Default 2s."},
    {"orphan_grace", "DURATION", "A container whose cgroup was never seen is removed after this. Default 10m."},
    {"health_ignored_xids", "LIST", "XIDs that do not make a GPU unhealthy (application errors). Default 13,31,43,45,68,109."},
    {"health_recovery", "DURATION", "An unhealthy GPU recovers after this long without a new critical event, if it answers NVML. Default 60s."},
    {"mode", "NAME", "Mode module to start (see `vgpu-node --help` for those built in); \"none\" = registration and metrics only. Default none."},
    {"log_level", "LEVEL", "error, warn, info or debug. Default info."},
    {"log_format", "FORMAT", "logfmt or json. Default logfmt."},
    {"node_name", "NAME", "Value of the node label in metrics. Default $NODE_NAME, else the host name."},
    {"ready_file", "PATH", "Written (socket=, metrics=, pid= lines) once the daemon serves. Default none."},
};

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string NormalKey(std::string_view key) {
  std::string k(key);
  for (char& c : k) {
    if (c == '-') c = '_';
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return k;
}

bool KnownKey(const std::string& key) {
  return std::any_of(kKeys.begin(), kKeys.end(), [&](const ConfigKey& k) { return key == k.name; });
}

bool ParseInt(std::string_view text, int64_t lo, int64_t hi, int64_t* out, int base = 10) {
  const std::string t(text);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = strtoll(t.c_str(), &end, base);
  if (errno != 0 || end == t.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool IsAbsolute(const std::string& p) { return !p.empty() && p[0] == '/'; }

// Applies one value; "" or what is wrong with it.
std::string Apply(NodeConfig* c, const std::string& key, const std::string& value) {
  int64_t n = 0;
  auto path = [&](std::string* field, bool allow_empty) -> std::string {
    if ((value.empty() && allow_empty) || IsAbsolute(value)) {
      *field = value;
      return "";
    }
    return "expected an absolute path";
  };
  auto duration = [&](int64_t* field, int64_t min_ms) -> std::string {
    const std::optional<int64_t> ms = ParseDurationMs(value);
    if (!ms || *ms < min_ms) {
      return "expected a duration such as 500ms, 2s or 10m" + (min_ms > 0 ? " (at least " + std::to_string(min_ms) + "ms)" : std::string());
    }
    *field = *ms;
    return "";
  };
  if (key == "state_dir") return path(&c->state_dir, false);
  if (key == "socket") return path(&c->socket, true);
  if (key == "container_ledger_path") return path(&c->container_ledger_path, false);
  if (key == "proc_root") return path(&c->proc_root, false);
  if (key == "cgroup_root") return path(&c->cgroup_root, false);
  if (key == "ready_file") return path(&c->ready_file, true);
  if (key == "socket_mode") {
    if (!ParseInt(value, 0, 0777, &n, 8)) return "expected an octal mode such as 0666";
    c->socket_mode = static_cast<uint32_t>(n);
    return "";
  }
  if (key == "metrics_listen") {
    if (value == "off") {
      c->metrics_listen = value;
      return "";
    }
    const size_t colon = value.rfind(':');
    if (colon == std::string::npos || !ParseInt(value.substr(colon + 1), 0, 65535, &n)) {
      return "expected host:port, :port or off";
    }
    c->metrics_listen = value;
    return "";
  }
  if (key == "nvml_library") {
    if (value.empty()) return "expected a library name, a path or off";
    c->nvml_library = value;
    return "";
  }
  if (key == "scan_interval") return duration(&c->scan_interval_ms, 10);
  if (key == "request_timeout") return duration(&c->request_timeout_ms, 1);
  if (key == "bypass_grace") return duration(&c->bypass_grace_ms, 0);
  if (key == "orphan_grace") return duration(&c->orphan_grace_ms, 0);
  if (key == "health_recovery") return duration(&c->health_recovery_ms, 0);
  if (key == "max_connections") {
    if (!ParseInt(value, 1, 1'000'000, &n)) return "expected a number 1..1000000";
    c->max_connections = static_cast<int>(n);
    return "";
  }
  if (key == "server_threads") {
    if (!ParseInt(value, 1, 64, &n)) return "expected a number 1..64";
    c->server_threads = static_cast<int>(n);
    return "";
  }
  if (key == "bypass_action") {
    if (value == "report") c->bypass_action = BypassAction::kReport;
    else if (value == "kill") c->bypass_action = BypassAction::kKill;
    else return "expected report or kill";
    return "";
  }
  if (key == "health_ignored_xids") {
    std::vector<uint32_t> xids;
    std::istringstream in(value);
    for (std::string item; std::getline(in, item, ',');) {
      const std::string t = Trim(item);
      if (t.empty()) continue;
      if (!ParseInt(t, 0, 0xFFFFFFFF, &n)) return "expected a comma-separated list of XID numbers";
      xids.push_back(static_cast<uint32_t>(n));
    }
    c->health_ignored_xids = xids;
    return "";
  }
  if (key == "mode") {
    if (value.empty()) return "expected a mode name or none";
    c->mode = value;
    return "";
  }
  if (key == "log_level") return ParseLevel(value, &c->log_level) ? "" : "expected error, warn, info or debug";
  if (key == "log_format") return ParseLogFormat(value, &c->log_format) ? "" : "expected logfmt or json";
  if (key == "node_name") {
    c->node_name = value;
    return "";
  }
  return "unknown key";
}

std::string Unquote(const std::string& v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

struct Setting {
  std::string key;
  std::string value;
  Source source;
  std::string where;  // "file /etc/vgpu/node.conf:3", "VGPU_NODE_STATE_DIR", "--state-dir"
};

void ParseFile(const std::string& path, const std::string& text, std::vector<Setting>* out, std::vector<std::string>* errors) {
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string where = "file " + path + ":" + std::to_string(line_no);
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) {
      errors->push_back(where + ": expected `key = value`, got \"" + t + "\"");
      continue;
    }
    std::string value = Trim(t.substr(eq + 1));
    // A '#' starts a comment unless the value is quoted.
    if (!value.empty() && value[0] != '"') {
      const size_t hash = value.find(" #");
      if (hash != std::string::npos) value = Trim(value.substr(0, hash));
    }
    out->push_back({NormalKey(Trim(t.substr(0, eq))), Unquote(value), Source::kFile, where});
  }
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() { return kKeys; }

const char* SourceName(Source source) {
  switch (source) {
    case Source::kDefault: return "default";
    case Source::kFile: return "file";
    case Source::kEnvironment: return "environment";
    case Source::kFlag: return "flag";
  }
  return "default";
}

ConfigLoad LoadConfig(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env,
                      const std::function<bool(const std::string&, std::string*)>& read_file) {
  ConfigLoad load;
  std::vector<Setting> flags;
  std::string config_flag;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) load.operands.push_back(args[i]);
      break;
    }
    if (arg == "-h" || arg == "--help") {
      load.help = true;
      continue;
    }
    if (arg == "--print-config") {
      load.print_config = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      load.operands.push_back(arg);
      continue;
    }
    std::string key, value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      key = arg.substr(2, eq - 2);
      value = arg.substr(eq + 1);
    } else {
      key = arg.substr(2);
      if (i + 1 >= args.size()) {
        load.errors.push_back("option " + arg + " needs a value");
        continue;
      }
      value = args[++i];
    }
    key = NormalKey(key);
    if (key == "config") {
      config_flag = value;
      continue;
    }
    flags.push_back({key, value, Source::kFlag, "--" + key});
  }

  // The file: --config, $VGPU_NODE_CONFIG, /etc/vgpu/node.conf (optional).
  std::vector<Setting> settings;
  std::string file = config_flag;
  bool file_required = !file.empty();
  if (file.empty()) {
    if (const char* e = env("VGPU_NODE_CONFIG"); e != nullptr && e[0] != '\0') {
      file = e;
      file_required = true;
    } else {
      file = "/etc/vgpu/node.conf";
    }
  }
  std::string text;
  if (read_file(file, &text)) {
    load.config_file = file;
    ParseFile(file, text, &settings, &load.errors);
  } else if (file_required) {
    load.errors.push_back("config file " + file + ": " + text);
  }
  // Environment: VGPU_NODE_<KEY>.
  for (const ConfigKey& k : kKeys) {
    std::string name = "VGPU_NODE_" + std::string(k.name);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (const char* v = env(name.c_str()); v != nullptr && v[0] != '\0') {
      settings.push_back({k.name, v, Source::kEnvironment, name});
    }
  }
  settings.insert(settings.end(), flags.begin(), flags.end());

  // Later settings win: file < environment < flags.
  for (const Setting& s : settings) {
    if (s.key.find('.') != std::string::npos) {
      if (s.source == Source::kEnvironment) continue;
      load.config.module_options[s.key] = s.value;
      load.sources[s.key] = s.source;
      continue;
    }
    if (!KnownKey(s.key)) {
      load.errors.push_back(s.where + ": unknown key \"" + s.key + "\" (see vgpu-node --help)");
      continue;
    }
    const std::string problem = Apply(&load.config, s.key, s.value);
    if (!problem.empty()) {
      load.errors.push_back(s.where + ": invalid " + s.key + "=\"" + s.value + "\": " + problem);
      continue;
    }
    load.sources[s.key] = s.source;
  }
  if (load.config.node_name.empty()) {
    const char* n = env("NODE_NAME");
    load.config.node_name = (n != nullptr && n[0] != '\0') ? n : HostName();
  }
  return load;
}

std::string DescribeConfig(const ConfigLoad& load) {
  const NodeConfig& c = load.config;
  std::ostringstream out;
  out << "# vgpu-node effective configuration" << (load.config_file.empty() ? "" : " (file " + load.config_file + ")") << "\n";
  auto line = [&](const char* key, const std::string& value) {
    const auto it = load.sources.find(key);
    out << key << " = " << value << "  # " << SourceName(it == load.sources.end() ? Source::kDefault : it->second) << "\n";
  };
  auto ms = [](int64_t v) { return std::to_string(v) + "ms"; };
  char mode[16];
  snprintf(mode, sizeof(mode), "0%o", c.socket_mode);
  std::string xids;
  for (uint32_t x : c.health_ignored_xids) xids += (xids.empty() ? "" : ",") + std::to_string(x);
  line("state_dir", c.state_dir);
  line("socket", c.SocketPath());
  line("socket_mode", mode);
  line("container_ledger_path", c.container_ledger_path);
  line("metrics_listen", c.metrics_listen);
  line("proc_root", c.proc_root);
  line("cgroup_root", c.cgroup_root);
  line("nvml_library", c.nvml_library);
  line("scan_interval", ms(c.scan_interval_ms));
  line("request_timeout", ms(c.request_timeout_ms));
  line("max_connections", std::to_string(c.max_connections));
  line("server_threads", std::to_string(c.server_threads));
  line("bypass_action", c.bypass_action == BypassAction::kKill ? "kill" : "report");
  line("bypass_grace", ms(c.bypass_grace_ms));
  line("orphan_grace", ms(c.orphan_grace_ms));
  line("health_ignored_xids", xids);
  line("health_recovery", ms(c.health_recovery_ms));
  line("mode", c.mode);
  line("log_level", LevelName(c.log_level));
  line("log_format", c.log_format == LogFormat::kJson ? "json" : "logfmt");
  line("node_name", c.node_name);
  line("ready_file", c.ready_file);
  for (const auto& [key, value] : c.module_options) line(key.c_str(), value);
  return out.str();
}

std::string HelpText() {
  std::ostringstream out;
  out << "Usage: vgpu-node [serve] [--config FILE] [--KEY VALUE ...] [--print-config]\n"
         "       vgpu-node container add --pod-uid UID --container NAME [--cgroup PATH] [--memory SIZE]\n"
         "                               [--compute PERCENT] [--namespace NS] [--pod-name NAME] [--KEY VALUE ...]\n"
         "       vgpu-node container remove KEY [--KEY VALUE ...]\n"
         "       vgpu-node container list [--KEY VALUE ...]\n"
         "\n"
         "The vgpu node daemon: registration socket for libvgpu.so, per-container ledger\n"
         "directories, Prometheus metrics, bypass detection and GPU health. docs/node.md has the\n"
         "whole story; docs/metrics.md lists the metrics.\n"
         "\n"
         "Configuration keys (flag --key, environment VGPU_NODE_<KEY>, file `key = value`;\n"
         "precedence flag > environment > file > default):\n";
  for (const ConfigKey& k : kKeys) {
    std::string name = std::string(k.name) + " " + k.value_help;
    out << "  " << name << "\n      " << k.help << "\n";
  }
  out << "\nDotted keys (e.g. k8s.resource_name) are options of the mode module.\n"
         "Signals: SIGTERM/SIGINT stop cleanly; SIGHUP rescans the container directories.\n";
  return out.str();
}

}  // namespace vgpu::node
