// What the daemon learns about host processes and cgroups, from a /proc and a cgroup filesystem
// whose roots are configurable (tests point them at fake trees).
//
// cgroup v1 and v2. /proc/<pid>/cgroup has one "hierarchy-id:controllers:path" line per
// hierarchy; v2 is the single "0::path" line. The path that identifies a process's container is
// chosen by ContainerCgroupPath: on a pure v2 system the unified path; with v1 hierarchies the
// memory controller's path (then pids, cpu, cpuacct, name=systemd, then the first non-empty one),
// because that is where kubelet and container runtimes place every container on v1.
//
// Matching a container record (see container_store.h):
//   - a record with an explicit cgroup P matches a process whose path is P or below P;
//   - a Kubernetes record matches a process whose path has a component containing
//     "pod<uid>" (cgroupfs driver) or "pod<uid with '_' for '-'>" (systemd driver).
//
// Thread safety: ProcFs is immutable after construction; its methods may run concurrently.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vgpu::node {

struct ProcCgroup {
  std::string unified;                        // "0::" line's path ("" if none)
  std::map<std::string, std::string> v1;      // controller -> path (a "cpu,cpuacct" line gives both)
  bool has_unified_line = false;
};

// Parses /proc/<pid>/cgroup text. Lines that do not parse are ignored.
ProcCgroup ParseProcCgroup(std::string_view text);

// The path that identifies the process's container (see above); "" when none.
std::string ContainerCgroupPath(const ProcCgroup& cgroup);

// Whether `path` is `parent` or lies below it ("/" contains everything).
bool CgroupContains(std::string_view parent, std::string_view path);

// Whether some component of `path` names the pod `pod_uid` (either separator style).
bool CgroupNamesPod(std::string_view path, std::string_view pod_uid);

struct ProcessFacts {
  bool exists = false;
  std::string cgroup;       // ContainerCgroupPath of its /proc/<pid>/cgroup
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
  int32_t ns_pid = 0;       // innermost pid (last NSpid entry of /proc/<pid>/status); 0 = unknown
  std::string comm;         // /proc/<pid>/comm
};

class ProcFs {
 public:
  ProcFs(std::string proc_root, std::string cgroup_root);

  // Reads cgroup + stat (+ status and comm when `full`). exists=false when the pid is gone.
  ProcessFacts Facts(int32_t host_pid, bool full) const;
  // Only /proc/<pid>/stat's start time; 0 when gone.
  uint64_t StartTime(int32_t host_pid) const;
  // Alive and still the process that started at `start_time` (0 = do not compare): the stat file
  // under proc_root exists, shows that start time and is not a zombie.
  bool Alive(int32_t host_pid, uint64_t start_time) const;
  // readlink(<proc_root>/<pid>/ns/<name>), e.g. "mnt:[4026531840]"; "" when unreadable.
  std::string Namespace(int32_t host_pid, const char* name) const;
  // Whether the cgroup directory `path` exists (checked under the unified root on v2, under the
  // v1 hierarchies otherwise; on hybrid hosts the unified hierarchy at <root>/unified is not
  // consulted: deleted pods leave directories there).
  bool CgroupExists(const std::string& path) const;
  // A cgroup directory (relative path) that names the pod, searched to depth 6; "" when none.
  std::string FindPodCgroup(const std::string& pod_uid) const;

  const std::string& proc_root() const { return proc_root_; }
  const std::string& cgroup_root() const { return cgroup_root_; }

 private:
  std::string proc_root_;
  std::string cgroup_root_;
  std::vector<std::string> hierarchy_roots_;  // where CgroupExists looks
};

// Reads a small file (at most `limit` bytes); nullopt when it cannot be opened.
std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit = 64 * 1024);

}  // namespace vgpu::node
