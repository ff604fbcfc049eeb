// Registration latency of vgpu-node: N processes register at the same instant (a burst), for R
// rounds, plus N registrations one after another (uncontended). Latency is what a client sees:
// connect + request + reply, measured with CLOCK_MONOTONIC in the client process. The daemon is
// the real binary on a unix socket in a temporary directory, reading the real /proc; the
// benchmark's own cgroup is the limited group (so every client is a legitimate member).
//
//   registration [--daemon PATH] [--clients N] [--rounds R] [--target-ms T]
//
// Prints a table (markdown) with p50/p90/p99/max per mode and the daemon's own handling-time
// histogram from /metrics. The same bursts are then run against a no-op server (a child that
// answers every request at once with a canned reply: no /proc, no records, no logs), which is
// this machine's floor for the burst: on a machine with few CPUs, 200 processes woken at once
// queue for the CPUs whatever the server does, and the difference between the two rows is what
// the daemon's own work costs. Exit status: 0 when every registration succeeded (the latency target
// is reported as met or missed, not enforced: latency depends on the machine); 1 otherwise.
#include <arpa/inet.h>
#include <sys/un.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/fork_together.h"
#include "node/container_store.h"
#include "node/procfs.h"
#include "protocol/wire.h"
#include "protocol/wire_transport.h"

#ifndef VGPU_NODE_EXE
#define VGPU_NODE_EXE "vgpu-node"
#endif

namespace {

using namespace vgpu::node;
namespace wire = vgpu::wire;

struct Sample {
  int32_t ok = 0;
  int64_t ns = 0;
};

std::string Frame() {
  wire::RegisterRequest r;
  r.pod_uid = "bench";
  r.container_name = "main";
  r.pid = static_cast<uint32_t>(getpid());
  r.client = "bench";
  return wire::EncodeFrame(wire::MessageType::kRegisterRequest, wire::EncodeRegisterRequest(r));
}

Sample RegisterOnce(const std::string& socket) {
  Sample s;
  const std::string frame = Frame();
  const int64_t start = wire::MonotonicNs();
  const wire::ExchangeResult x = wire::Exchange(socket, frame, 10000, wire::kMaxReplyPayload);
  s.ns = wire::MonotonicNs() - start;
  wire::RegisterReply reply;
  s.ok = x.ok() && x.header.type == wire::MessageType::kRegisterReply && wire::DecodeRegisterReply(x.payload, &reply).empty() &&
         reply.status == wire::Status::kOk && reply.host_pid == static_cast<uint32_t>(getpid());
  if (!s.ok) fprintf(stderr, "registration failed: %s %s\n", x.error.c_str(), reply.message.c_str());
  return s;
}

// One burst: n processes, released together (once all of them wait for the release).
std::vector<Sample> Burst(const std::string& socket, int n) {
  return vgpu::ForkTogether<Sample>(
      n, [&] { return RegisterOnce(socket); }, [](const std::vector<pid_t>&) { usleep(200000); });
}

// The floor: a single-threaded server that reads each request frame and answers "ok" with the
// caller's SO_PEERCRED pid, nothing else. Runs until killed.
[[noreturn]] void ServeNoOp(const std::string& path) {
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  unlink(path.c_str());
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1024) != 0) {
    _exit(1);
  }
  for (;;) {
    const int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    unsigned char header[wire::kHeaderBytes];
    wire::FrameHeader h;
    if (read(c, header, sizeof(header)) == static_cast<ssize_t>(sizeof(header)) &&
        wire::DecodeHeader(header, wire::kMaxRequestPayload, &h).empty()) {
      std::string payload(h.payload_length, '\0');
      size_t got = 0;
      for (ssize_t n; got < payload.size() && (n = read(c, payload.data() + got, payload.size() - got)) > 0;) got += static_cast<size_t>(n);
      ucred cred{};
      socklen_t len = sizeof(cred);
      getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len);
      wire::RegisterReply reply;
      reply.status = wire::Status::kOk;
      reply.host_pid = static_cast<uint32_t>(cred.pid);
      reply.container_key = "bench_main";
      reply.ledger_path = "/dev/null";  // a reply needs one; nobody opens it
      const std::string out = wire::EncodeFrame(wire::MessageType::kRegisterReply, wire::EncodeRegisterReply(reply));
      [[maybe_unused]] ssize_t w = write(c, out.data(), out.size());
    }
    close(c);
  }
}

double Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return static_cast<double>(v[i]) / 1e6;
}

std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(atoi(address.c_str() + colon + 1)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\n\r\n";
  [[maybe_unused]] ssize_t w = write(fd, req.data(), req.size());
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t at = body.find("\r\n\r\n");
  return at == std::string::npos ? "" : body.substr(at + 4);
}

}  // namespace

int main(int argc, char** argv) {
  std::string daemon_path = VGPU_NODE_EXE;
  int clients = 200, rounds = 5;
  double target_ms = 5.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--daemon") daemon_path = argv[i + 1];
    else if (a == "--clients") clients = atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = atoi(argv[i + 1]);
    else if (a == "--target-ms") target_ms = atof(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--daemon PATH] [--clients N] [--rounds R] [--target-ms T]\n", argv[0]);
      return 2;
    }
  }
  char dir_template[] = "/tmp/vgpu-bench-registration-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::optional<std::string> cgroup_text = ReadSmallFile("/proc/self/cgroup");
  ContainerStore store(dir + "/containers");
  ContainerSpec spec;
  spec.pod_uid = "bench";
  spec.container_name = "main";
  spec.cgroup = cgroup_text ? ContainerCgroupPath(ParseProcCgroup(*cgroup_text)) : "/";
  spec.limits.default_memory_limit = 1ull << 30;
  if (!store.Init().ok || !store.Ensure(spec, nullptr).ok) {
    fprintf(stderr, "cannot create the container directory under %s\n", dir.c_str());
    return 1;
  }
  const std::string ready = dir + "/ready";
  const pid_t daemon = fork();
  if (daemon == 0) {
    const int log = open((dir + "/daemon.log").c_str(), O_WRONLY | O_CREAT, 0644);
    dup2(log, 2);
    const std::string a1 = "--state-dir=" + dir, a2 = "--ready-file=" + ready;
    execl(daemon_path.c_str(), daemon_path.c_str(), a1.c_str(), a2.c_str(), "--metrics-listen=127.0.0.1:0", "--nvml-library=off",
          "--log-level=warn", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string metrics_address;
  for (int i = 0; i < 200 && metrics_address.empty(); ++i) {
    usleep(50000);
    const std::optional<std::string> text = ReadSmallFile(ready);
    if (text && text->find("metrics=") != std::string::npos) {
      const size_t at = text->find("metrics=") + 8;
      metrics_address = text->substr(at, text->find('\n', at) - at);
    }
  }
  if (metrics_address.empty()) {
    fprintf(stderr, "vgpu-node did not start (%s); log in %s/daemon.log\n", daemon_path.c_str(), dir.c_str());
    kill(daemon, SIGKILL);
    return 1;
  }
  const std::string socket = dir + "/vgpu.sock";

  std::vector<int64_t> burst, sequential;
  int failures = 0;
  for (int i = 0; i < 20; ++i) RegisterOnce(socket);  // warm-up (not counted)
  for (int r = 0; r < rounds; ++r) {
    const std::vector<Sample> samples = Burst(socket, clients);
    failures += clients - static_cast<int>(samples.size());
    for (const Sample& s : samples) {
      failures += !s.ok;
      burst.push_back(s.ns);
    }
  }
  for (int i = 0; i < clients; ++i) {
    const Sample s = RegisterOnce(socket);
    failures += !s.ok;
    sequential.push_back(s.ns);
  }
  const std::string metrics = HttpGet(metrics_address, "/metrics");
  kill(daemon, SIGTERM);
  int status = 0;
  waitpid(daemon, &status, 0);

  // The same bursts against the no-op server.
  const std::string noop_socket = dir + "/noop.sock";
  const pid_t noop = fork();
  if (noop == 0) ServeNoOp(noop_socket);
  for (int i = 0; i < 200 && access(noop_socket.c_str(), F_OK) != 0; ++i) usleep(10000);
  std::vector<int64_t> floor;
  for (int i = 0; i < 20; ++i) RegisterOnce(noop_socket);  // warm-up (not counted)
  for (int r = 0; r < rounds; ++r) {
    const std::vector<Sample> samples = Burst(noop_socket, clients);
    failures += clients - static_cast<int>(samples.size());
    for (const Sample& s : samples) {
      failures += !s.ok;
      floor.push_back(s.ns);
    }
  }
  kill(noop, SIGKILL);
  waitpid(noop, nullptr, 0);

  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("## vgpu-node registration latency (client-side: connect + request + reply)\n\n");
  printf("%d rounds of %d processes registering at the same instant, then %d one after another; %ld CPUs\n\n", rounds, clients,
         clients, cpus);
  printf("| mode | registrations | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  printf("| burst of %d | %zu | %.3f | %.3f | %.3f | %.3f |\n", clients, burst.size(), Percentile(burst, 50), Percentile(burst, 90),
         Percentile(burst, 99), Percentile(burst, 100));
  printf("| sequential | %zu | %.3f | %.3f | %.3f | %.3f |\n", sequential.size(), Percentile(sequential, 50),
         Percentile(sequential, 90), Percentile(sequential, 99), Percentile(sequential, 100));
  printf("| burst of %d, no-op server (this machine's floor) | %zu | %.3f | %.3f | %.3f | %.3f |\n\n", clients, floor.size(),
         Percentile(floor, 50), Percentile(floor, 90), Percentile(floor, 99), Percentile(floor, 100));
  printf("daemon-side handling time (vgpu_registration_duration_seconds, cumulative):\n");
  for (size_t at = metrics.find("vgpu_registration_duration_seconds_bucket"); at != std::string::npos;
       at = metrics.find("vgpu_registration_duration_seconds_bucket", at + 1)) {
    printf("  %s\n", metrics.substr(at, metrics.find('\n', at) - at).c_str());
  }
  const double p99 = Percentile(burst, 99);
  printf("\nfailed registrations: %d\n", failures);
  printf("target p99 < %.1f ms under a burst of %d: %s (p99 %.3f ms; the no-op server's p99 on this machine: %.3f ms)\n",
         target_ms, clients, p99 < target_ms ? "met" : "MISSED", p99, Percentile(floor, 99));
  printf("daemon exit status after SIGTERM: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  std::string rm = "rm -rf '" + dir + "'";
  [[maybe_unused]] int rc = system(rm.c_str());
  return failures == 0 ? 0 : 1;
}
