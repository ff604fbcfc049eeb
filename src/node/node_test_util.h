// Test helpers for vgpu-node: a temporary directory with a fake /proc and cgroup tree.
#pragma once

#include <cstdint>
#include <string>

namespace vgpu::node::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// <root>/proc/<pid>/{stat,cgroup,status,comm,ns/mnt,ns/pid} and <root>/cgroup/<paths>.
class FakeHost {
 public:
  explicit FakeHost(const std::string& root);
  std::string proc_root() const { return root_ + "/proc"; }
  std::string cgroup_root() const { return root_ + "/cgroup"; }

  // A process in `cgroup_text` (the /proc/<pid>/cgroup contents; "0::/x" style, with a newline
  // added when missing), state 'S' (or `state`), start time `start_time`, innermost ns pid.
  void AddProcess(int32_t pid, const std::string& cgroup_text, uint64_t start_time, int32_t ns_pid = 0,
                  const std::string& comm = "proc", char state = 'S');
  void RemoveProcess(int32_t pid);
  // Namespace links: <proc>/<pid|self>/ns/<name> -> value.
  void SetNamespace(const std::string& pid_or_self, const std::string& name, const std::string& value);
  void MakeCgroup(const std::string& path);    // mkdir -p under cgroup_root
  void RemoveCgroup(const std::string& path);  // rmdir (must be empty of directories)

 private:
  std::string root_;
};

void WriteFile(const std::string& path, const std::string& text);
void MakeDirs(const std::string& path);
std::string ReadFile(const std::string& path);

}  // namespace vgpu::node::testing
