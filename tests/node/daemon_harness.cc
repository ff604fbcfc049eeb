#include "daemon_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <thread>

#include "node/procfs.h"

extern char** environ;

namespace vgpu::node::testing {

DaemonProcess::DaemonProcess(std::string state_dir, std::vector<std::string> extra, std::map<std::string, std::string> env)
    : state_dir_(std::move(state_dir)), extra_(std::move(extra)), env_(std::move(env)) {}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool DaemonProcess::Start() {
  const std::string ready = state_dir_ + "/ready";
  unlink(ready.c_str());
  std::vector<std::string> args = {VGPU_NODE_EXE, "--state-dir=" + state_dir_, "--metrics-listen=127.0.0.1:0",
                                   "--ready-file=" + ready, "--log-level=debug"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (env_.count(name) == 0 && name.rfind("VGPU_NODE_", 0) != 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env_) env_strings.push_back(k + "=" + v);
  pid_ = fork();
  if (pid_ == 0) {
    const int log = open((state_dir_ + "/daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(log, 2);
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const bool up = WaitFor(10000, [&] {
    const std::string text = ReadFile(ready);
    const size_t at = text.find("metrics=");
    if (at == std::string::npos) return !Running() ? true : false;
    metrics_ = text.substr(at + 8, text.find('\n', at) - at - 8);
    return true;
  });
  return up && Running() && !metrics_.empty();
}

bool DaemonProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int DaemonProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(50000);
  }
  return -1;
}

std::string DaemonProcess::log() const { return ReadFile(state_dir_ + "/daemon.log"); }

std::string DaemonProcess::Get(const std::string& path, int* status) const {
  if (status != nullptr) *status = -1;
  const size_t colon = metrics_.rfind(':');
  if (colon == std::string::npos) return "";
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(atoi(metrics_.c_str() + colon + 1)));
  inet_pton(AF_INET, metrics_.substr(0, colon).c_str(), &addr.sin_addr);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n";
  [[maybe_unused]] ssize_t w = send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return "";
  if (status != nullptr) *status = atoi(response.c_str() + 9);
  return response.substr(body + 4);
}

wire::ExchangeResult SendRaw(const std::string& socket, const std::string& bytes, int timeout_ms) {
  return wire::Exchange(socket, bytes, timeout_ms, wire::kMaxReplyPayload);
}

std::string RegisterFrame(const std::string& pod_uid, const std::string& container, uint32_t pid) {
  wire::RegisterRequest r;
  r.pod_uid = pod_uid;
  r.container_name = container;
  r.pid = pid;
  r.client = "test";
  return wire::EncodeFrame(wire::MessageType::kRegisterRequest, wire::EncodeRegisterRequest(r));
}

double MetricValue(const std::string& metrics, const std::string& series) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series, 0) != 0) continue;
    // A bare name must be the whole name; a series with labels may name only the first ones.
    const char next = line.size() > series.size() ? line[series.size()] : '\0';
    if (series.find('{') == std::string::npos && next != ' ' && next != '{') continue;
    return strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return -1;
}

bool WaitFor(int timeout_ms, const std::function<bool()>& condition) {
  for (int waited = 0;; waited += 50) {
    if (condition()) return true;
    if (waited >= timeout_ms) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string OwnCgroup() {
  const std::optional<std::string> text = ReadSmallFile("/proc/self/cgroup");
  return text ? ContainerCgroupPath(ParseProcCgroup(*text)) : "";
}

}  // namespace vgpu::node::testing

namespace vgpu::node::testing {

bool SendAndClose(const std::string& socket_path, const std::string& bytes, int timeout_ms) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return false;
  }
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  [[maybe_unused]] ssize_t w = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (reply.size() < wire::kHeaderBytes) return false;
  wire::FrameHeader h;
  return wire::DecodeHeader(reinterpret_cast<const unsigned char*>(reply.data()), wire::kMaxReplyPayload, &h).empty() &&
         reply.size() == wire::kHeaderBytes + h.payload_length;
}

}  // namespace vgpu::node::testing

namespace vgpu::node::testing {

pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& out_prefix) {
  std::vector<std::string> strings;
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  if (env.count("PATH") == 0) strings.push_back("PATH=/usr/bin:/bin");
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open((out_prefix + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open((out_prefix + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<std::string> args = argv;
    std::vector<char*> a, e;
    for (std::string& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (std::string& s : strings) e.push_back(s.data());
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    usleep(10000);
  }
  return -1;
}

}  // namespace vgpu::node::testing
