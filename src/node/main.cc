// vgpu-node: configuration, signals, the mode module and the `container` subcommand. All logic
// lives in the library (daemon.h and friends).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/config.h"
#include "node/container_store.h"
#include "node/daemon.h"
#include "node/mode_module.h"
#include "node/node_config.h"
#include "node/procfs.h"

#ifndef VGPU_VERSION
#define VGPU_VERSION "0"
#endif

namespace {

using namespace vgpu::node;

bool ReadFile(const std::string& path, std::string* text) {
  const std::optional<std::string> t = ReadSmallFile(path, 1 << 20);
  if (!t) {
    *text = "cannot read";
    return false;
  }
  *text = *t;
  return true;
}

// Options of `container add` that are not configuration keys.
struct ContainerArgs {
  std::string pod_uid, container, cgroup, ns, pod_name, memory, compute, priority;
};

// Moves the container options out of `args`; returns an error or "".
std::string TakeContainerArgs(std::vector<std::string>* args, ContainerArgs* out) {
  const std::pair<const char*, std::string*> table[] = {
      {"--pod-uid", &out->pod_uid}, {"--container", &out->container}, {"--cgroup", &out->cgroup},
      {"--namespace", &out->ns},    {"--pod-name", &out->pod_name},   {"--memory", &out->memory},
      {"--compute", &out->compute}, {"--priority", &out->priority}};
  std::vector<std::string> rest;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    bool taken = false;
    for (const auto& [name, field] : table) {
      const std::string n = name;
      if (a == n) {
        if (i + 1 >= args->size()) return "option " + n + " needs a value";
        *field = (*args)[++i];
        taken = true;
      } else if (a.rfind(n + "=", 0) == 0) {
        *field = a.substr(n.size() + 1);
        taken = true;
      }
      if (taken) break;
    }
    if (!taken) rest.push_back(a);
  }
  args->swap(rest);
  return "";
}

int ContainerCommand(const std::vector<std::string>& raw_args) {
  std::vector<std::string> args = raw_args;
  ContainerArgs c;
  if (std::string bad = TakeContainerArgs(&args, &c); !bad.empty()) {
    std::cerr << "vgpu-node container: " << bad << "\n";
    return 2;
  }
  ConfigLoad load = LoadConfig(args, [](const char* n) { return getenv(n); }, ReadFile);
  if (load.help) {
    std::cout << HelpText();
    return 0;
  }
  for (const std::string& e : load.errors) std::cerr << "vgpu-node: " << e << "\n";
  if (!load.ok()) return 2;
  if (load.operands.empty()) {
    std::cerr << "vgpu-node container: expected add, remove or list (see vgpu-node --help)\n";
    return 2;
  }
  ContainerStore store(load.config.ContainersDir());
  const std::string verb = load.operands[0];
  if (verb == "list") {
    store.Rescan();
    for (const ContainerRecord& r : store.List()) {
      std::cout << r.key << "\t" << (r.error.empty() ? (r.released() ? "released" : "active") : "error: " + r.error) << "\t"
                << r.LedgerPath() << "\t" << r.EffectiveCgroup() << "\n";
    }
    return 0;
  }
  if (verb == "remove") {
    if (load.operands.size() != 2) {
      std::cerr << "vgpu-node container remove: expected one KEY\n";
      return 2;
    }
    store.Rescan();
    const Status s = store.Remove(load.operands[1]);
    if (!s.ok) std::cerr << "vgpu-node container remove: " << s.message << "\n";
    return s.ok ? 0 : 1;
  }
  if (verb != "add") {
    std::cerr << "vgpu-node container: unknown verb \"" << verb << "\" (add, remove, list)\n";
    return 2;
  }
  ContainerSpec spec;
  spec.pod_uid = c.pod_uid;
  spec.container_name = c.container;
  spec.cgroup = c.cgroup;
  spec.ns = c.ns;
  spec.pod_name = c.pod_name;
  spec.limits.authority = vgpu::ledger::Authority::kNodeDaemon;
  if (!c.memory.empty()) {
    std::string why;
    const std::optional<uint64_t> bytes = vgpu::ParseSize(c.memory, &why);
    if (!bytes || *bytes == 0) {
      std::cerr << "vgpu-node container add: invalid --memory \"" << c.memory << "\": " << (why.empty() ? "must not be 0" : why) << "\n";
      return 2;
    }
    spec.limits.default_memory_limit = *bytes;
  }
  if (!c.compute.empty()) {
    const std::optional<int> pct = vgpu::ParsePercent(c.compute);
    if (!pct) {
      std::cerr << "vgpu-node container add: invalid --compute \"" << c.compute << "\": expected a percent 0..100\n";
      return 2;
    }
    spec.limits.default_sm_limit = *pct == 100 ? 0 : *pct;
  }
  if (!c.priority.empty()) {
    char* end = nullptr;
    const long p = strtol(c.priority.c_str(), &end, 10);
    if (*end != '\0' || p < 0 || p > vgpu::kMaxTaskPriority) {
      std::cerr << "vgpu-node container add: invalid --priority \"" << c.priority << "\": expected 0..100\n";
      return 2;
    }
    spec.limits.task_priority = static_cast<int>(p);
  }
  if (Status s = store.Init(); !s.ok) {
    std::cerr << "vgpu-node container add: " << s.message << "\n";
    return 1;
  }
  ContainerRecord record;
  const Status s = store.Ensure(spec, &record);
  if (!s.ok) {
    std::cerr << "vgpu-node container add: " << s.message << "\n";
    return 1;
  }
  std::cout << record.key << "\t" << record.LedgerPath() << "\n";
  return 0;
}

int Serve(const std::vector<std::string>& args) {
  ConfigLoad load = LoadConfig(args, [](const char* n) { return getenv(n); }, ReadFile);
  if (load.help) {
    std::cout << HelpText() << "\nMode modules built in:";
    for (const auto& [name, summary] : ListModes()) std::cout << "\n  " << name << "  " << summary;
    std::cout << (ListModes().empty() ? " none\n" : "\n");
    return 0;
  }
  for (const std::string& e : load.errors) std::cerr << "vgpu-node: " << e << "\n";
  if (!load.ok()) return 2;
  if (!load.operands.empty()) {
    std::cerr << "vgpu-node: unexpected argument \"" << load.operands[0] << "\" (see vgpu-node --help)\n";
    return 2;
  }
  if (load.print_config) {
    std::cout << DescribeConfig(load);
    return 0;
  }
  Logger log;
  log.Configure(load.config.log_level, load.config.log_format);

  std::unique_ptr<ModeModule> module;
  if (load.config.mode != "none") {
    module = CreateMode(load.config.mode);
    if (!module) {
      std::string known;
      for (const auto& [name, summary] : ListModes()) known += (known.empty() ? "" : ", ") + name;
      log.Log(Level::kError, "daemon", "unknown mode", {{"mode", load.config.mode}, {"built_in", known.empty() ? "none" : known}});
      return 2;
    }
  }

  // Signals are taken synchronously by this thread; every other thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Daemon daemon(load.config, log);
  if (Status s = daemon.Start(); !s.ok) {
    log.Log(Level::kError, "daemon", "cannot start", {{"error", s.message}});
    return 1;
  }
  if (module) {
    const ModeContext context{daemon.config(), daemon, daemon, log};
    if (Status s = module->Start(context); !s.ok) {
      log.Log(Level::kError, "daemon", "mode module failed to start", {{"mode", load.config.mode}, {"error", s.message}});
      daemon.Stop();
      return 1;
    }
    log.Log(Level::kInfo, "daemon", "mode module started", {{"mode", load.config.mode}});
  }
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      log.Log(Level::kInfo, "daemon", "SIGHUP: rescanning container directories");
      daemon.ScanNow();
      continue;
    }
    log.Log(Level::kInfo, "daemon", "shutting down", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    break;
  }
  if (module) module->Stop();
  daemon.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--version") {
    std::cout << "vgpu-node " VGPU_VERSION "\n";
    return 0;
  }
  if (!args.empty() && args[0] == "container") return ContainerCommand({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "serve") args.erase(args.begin());
  return Serve(args);
}
