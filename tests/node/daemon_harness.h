// Runs the real vgpu-node binary for integration tests: a temporary state directory, a unix
// socket there, metrics on 127.0.0.1 (a free port), and helpers to talk to it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "node/node_test_util.h"
#include "protocol/wire.h"
#include "protocol/wire_transport.h"

namespace vgpu::node::testing {

class DaemonProcess {
 public:
  // `state_dir` must exist. `extra` are additional --key=value flags. `env` is added to the
  // daemon's environment (on top of the test's).
  DaemonProcess(std::string state_dir, std::vector<std::string> extra, std::map<std::string, std::string> env = {});
  ~DaemonProcess();  // SIGKILLs a daemon still running

  // Starts and waits (at most 10 s) for the ready file. False (with the log) on failure.
  bool Start();
  // SIGTERM and wait (at most 10 s); the exit status (128+N when killed), -1 on timeout.
  int Terminate();
  bool Running();

  std::string socket() const { return state_dir_ + "/vgpu.sock"; }
  const std::string& metrics_address() const { return metrics_; }
  std::string log() const;  // the daemon's stderr so far
  pid_t pid() const { return pid_; }

  // GET http://<metrics>/<path>; the body, or "" (with *status -1) on failure.
  std::string Get(const std::string& path, int* status = nullptr) const;
  std::string Metrics() const { return Get("/metrics"); }

 private:
  std::string state_dir_;
  std::vector<std::string> extra_;
  std::map<std::string, std::string> env_;
  pid_t pid_ = -1;
  std::string metrics_;
};

// Sends one raw frame and returns the raw reply (header + payload), or the failure.
wire::ExchangeResult SendRaw(const std::string& socket, const std::string& bytes, int timeout_ms = 2000);

// A register request frame.
std::string RegisterFrame(const std::string& pod_uid, const std::string& container, uint32_t pid);

// The value of the first sample line that starts with `series`, or -1 when there is none:
// "name" matches that metric exactly; "name{a=\"x\"" (labels, possibly only the first ones)
// matches by prefix.
double MetricValue(const std::string& metrics, const std::string& series);

// Polls `condition` every 50 ms for at most `timeout_ms`.
bool WaitFor(int timeout_ms, const std::function<bool()>& condition);

// The test process's own cgroup as the daemon will read it (/proc/self/cgroup).
std::string OwnCgroup();

}  // namespace vgpu::node::testing

namespace vgpu::node::testing {
// Sends `bytes`, half-closes (so the daemon sees the end of the request at once) and reads
// until the daemon closes or `timeout_ms` passes. Returns whether a complete reply frame came.
bool SendAndClose(const std::string& socket, const std::string& bytes, int timeout_ms = 2000);
}  // namespace vgpu::node::testing

namespace vgpu::node::testing {
// Starts argv[0] with exactly `env` (plus PATH), stdout/stderr to <out_prefix>.out / .err.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& out_prefix);
// Waits at most timeout_ms for pid; its exit status (128+signal when killed), or -1 on timeout.
int WaitExit(pid_t pid, int timeout_ms);
}  // namespace vgpu::node::testing
