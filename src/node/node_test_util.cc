#include "node/node_test_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace vgpu::node::testing {

TempDir::TempDir() {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && tmp[0] ? tmp : "/tmp") + "/vgpu-node-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

void MakeDirs(const std::string& path) { std::filesystem::create_directories(path); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

FakeHost::FakeHost(const std::string& root) : root_(root) {
  MakeDirs(proc_root());
  MakeDirs(cgroup_root());
}

void FakeHost::AddProcess(int32_t pid, const std::string& cgroup_text, uint64_t start_time, int32_t ns_pid,
                          const std::string& comm, char state) {
  const std::string dir = proc_root() + "/" + std::to_string(pid);
  MakeDirs(dir + "/ns");
  std::ostringstream stat;
  stat << pid << " (" << comm << ") " << state;
  for (int field = 4; field <= 21; ++field) stat << " 0";
  stat << " " << start_time << " 0 0\n";
  WriteFile(dir + "/stat", stat.str());
  WriteFile(dir + "/cgroup", cgroup_text.empty() || cgroup_text.back() == '\n' ? cgroup_text : cgroup_text + "\n");
  WriteFile(dir + "/status", "Name:\t" + comm + "\nNSpid:\t" + std::to_string(pid) +
                                 (ns_pid > 0 ? "\t" + std::to_string(ns_pid) : std::string()) + "\n");
  WriteFile(dir + "/comm", comm + "\n");
}

void FakeHost::RemoveProcess(int32_t pid) {
  std::error_code ec;
  std::filesystem::remove_all(proc_root() + "/" + std::to_string(pid), ec);
}

void FakeHost::SetNamespace(const std::string& pid_or_self, const std::string& name, const std::string& value) {
  const std::string dir = proc_root() + "/" + pid_or_self + "/ns";
  MakeDirs(dir);
  const std::string link = dir + "/" + name;
  unlink(link.c_str());
  if (symlink(value.c_str(), link.c_str()) != 0) throw std::runtime_error("symlink " + link);
}

void FakeHost::MakeCgroup(const std::string& path) { MakeDirs(cgroup_root() + path); }

void FakeHost::RemoveCgroup(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(cgroup_root() + path, ec);
}

}  // namespace vgpu::node::testing
