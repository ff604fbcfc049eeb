#include "node/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "ledger/ledger.h"

namespace vgpu::node {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string PidPath(const std::string& root, int32_t pid, const char* leaf) {
  return root + "/" + std::to_string(pid) + "/" + leaf;
}

std::string Underscored(std::string_view uid) {
  std::string u(uid);
  for (char& c : u) {
    if (c == '-') c = '_';
  }
  return u;
}

}  // namespace

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  while (text.size() < limit) {
    const ssize_t n = read(fd, buf, std::min(sizeof(buf), limit - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

ProcCgroup ParseProcCgroup(std::string_view text) {
  ProcCgroup out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    const size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1);
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (path.empty() || path[0] != '/') continue;
    if (id == "0" && controllers.empty()) {
      out.unified = std::string(path);
      out.has_unified_line = true;
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      if (!name.empty()) out.v1.emplace(std::string(name), std::string(path));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return out;
}

std::string ContainerCgroupPath(const ProcCgroup& cgroup) {
  if (cgroup.v1.empty()) return cgroup.unified;
  for (const char* name : {"memory", "pids", "cpu", "cpuacct", "name=systemd"}) {
    const auto it = cgroup.v1.find(name);
    if (it != cgroup.v1.end()) return it->second;
  }
  return cgroup.v1.begin()->second;
}

bool CgroupContains(std::string_view parent, std::string_view path) {
  if (parent.empty() || path.empty()) return false;
  if (parent == "/") return true;
  while (parent.size() > 1 && parent.back() == '/') parent.remove_suffix(1);
  if (path.substr(0, parent.size()) != parent) return false;
  return path.size() == parent.size() || path[parent.size()] == '/';
}

bool CgroupNamesPod(std::string_view path, std::string_view pod_uid) {
  if (pod_uid.empty()) return false;
  const std::string dashed = "pod" + std::string(pod_uid);
  const std::string underscored = "pod" + Underscored(pod_uid);
  while (!path.empty()) {
    if (path[0] == '/') {
      path.remove_prefix(1);
      continue;
    }
    const size_t slash = path.find('/');
    const std::string_view component = path.substr(0, slash);
    for (const std::string* needle : {&dashed, &underscored}) {
      const size_t at = component.find(*needle);
      if (at == std::string_view::npos) continue;
      // The uid must end there: "pod<uid>" then the end, '.', '/' (not a longer id).
      const size_t end = at + needle->size();
      if (end == component.size() || component[end] == '.') return true;
    }
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  return false;
}

ProcFs::ProcFs(std::string proc_root, std::string cgroup_root)
    : proc_root_(std::move(proc_root)), cgroup_root_(std::move(cgroup_root)) {
  // v1: one directory per hierarchy; the ones container runtimes always populate come first.
  bool v1_controllers = false;
  for (const char* name : {"memory", "pids", "cpu,cpuacct", "cpu", "systemd"}) {
    const std::string dir = cgroup_root_ + "/" + name;
    if (!IsDirectory(dir)) continue;
    hierarchy_roots_.push_back(dir);
    if (std::string_view(name) != "systemd") v1_controllers = true;
  }
  // v2: the root itself (or <root>/unified). Not on hybrid hosts (v1 controllers, cgroup2 at
  // <root>/unified, the root a tmpfs of mount points): the kubelet removes a deleted pod's cgroups
  // from the v1 hierarchies only, and runc's pod directories stay behind, empty, in the unified
  // one, where they would keep every deleted pod "present".
  if (!v1_controllers) {
    hierarchy_roots_.insert(hierarchy_roots_.begin(), cgroup_root_);
    if (IsDirectory(cgroup_root_ + "/unified")) hierarchy_roots_.push_back(cgroup_root_ + "/unified");
  }
}

ProcessFacts ProcFs::Facts(int32_t host_pid, bool full) const {
  ProcessFacts facts;
  if (host_pid <= 0) return facts;
  const std::optional<std::string> stat = ReadSmallFile(PidPath(proc_root_, host_pid, "stat"), 4096);
  char state = 0;
  if (!stat || !ledger::ParseProcStat(stat->c_str(), &state, &facts.start_time)) return facts;
  const std::optional<std::string> cgroup = ReadSmallFile(PidPath(proc_root_, host_pid, "cgroup"));
  if (!cgroup) return facts;
  facts.exists = state != 'Z' && state != 'X';
  facts.cgroup = ContainerCgroupPath(ParseProcCgroup(*cgroup));
  if (!full) return facts;
  if (const auto status = ReadSmallFile(PidPath(proc_root_, host_pid, "status"))) {
    const size_t at = status->find("\nNSpid:");
    if (at != std::string::npos) {
      const size_t end = status->find('\n', at + 1);
      const std::string line = status->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
      const size_t last = line.find_last_of(" \t");
      facts.ns_pid = static_cast<int32_t>(strtol(line.c_str() + (last == std::string::npos ? 0 : last + 1), nullptr, 10));
    }
  }
  if (const auto comm = ReadSmallFile(PidPath(proc_root_, host_pid, "comm"), 256)) {
    facts.comm = *comm;
    while (!facts.comm.empty() && (facts.comm.back() == '\n' || facts.comm.back() == '\r')) facts.comm.pop_back();
  }
  return facts;
}

uint64_t ProcFs::StartTime(int32_t host_pid) const {
  if (host_pid <= 0) return 0;
  const std::optional<std::string> stat = ReadSmallFile(PidPath(proc_root_, host_pid, "stat"), 4096);
  char state = 0;
  uint64_t start = 0;
  if (!stat || !ledger::ParseProcStat(stat->c_str(), &state, &start)) return 0;
  return start;
}

bool ProcFs::Alive(int32_t host_pid, uint64_t start_time) const {
  if (host_pid <= 0) return false;
  const std::optional<std::string> stat = ReadSmallFile(PidPath(proc_root_, host_pid, "stat"), 4096);
  char state = 0;
  uint64_t start = 0;
  if (!stat || !ledger::ParseProcStat(stat->c_str(), &state, &start)) return false;
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || start == start_time;
}

std::string ProcFs::Namespace(int32_t host_pid, const char* name) const {
  const std::string path = proc_root_ + "/" + (host_pid > 0 ? std::to_string(host_pid) : std::string("self")) + "/ns/" + name;
  char buf[128];
  const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

bool ProcFs::CgroupExists(const std::string& path) const {
  if (path.empty() || path[0] != '/' || path.find("/../") != std::string::npos) return false;
  for (const std::string& root : hierarchy_roots_) {
    if (IsDirectory(root + path)) return true;
  }
  return false;
}

std::string ProcFs::FindPodCgroup(const std::string& pod_uid) const {
  // Breadth-first over the first hierarchy root (and the v1 memory hierarchy if present).
  for (const std::string& root : hierarchy_roots_) {
    std::vector<std::string> level = {""};
    for (int depth = 0; depth < 6 && !level.empty(); ++depth) {
      std::vector<std::string> next;
      for (const std::string& rel : level) {
        DIR* dir = opendir((root + rel).c_str());
        if (dir == nullptr) continue;
        while (const dirent* e = readdir(dir)) {
          if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
          const std::string name = e->d_name;
          if (name == "." || name == "..") continue;
          const std::string child = rel + "/" + name;
          if (CgroupNamesPod(child, pod_uid)) {
            closedir(dir);
            return child;
          }
          if (next.size() < 20000) next.push_back(child);
        }
        closedir(dir);
      }
      level.swap(next);
    }
  }
  return "";
}

}  // namespace vgpu::node
