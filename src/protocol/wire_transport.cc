#include "protocol/wire_transport.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

namespace vgpu::wire {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int MsLeft(int64_t deadline_ns) {
  const int64_t left = deadline_ns - MonotonicNs();
  if (left <= 0) return 0;
  return static_cast<int>((left + 999'999) / 1'000'000);
}

// Waits for `events` on fd; false when the deadline passed first.
bool WaitFor(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    const int ms = MsLeft(deadline_ns);
    if (ms <= 0) return false;
    struct pollfd p = {fd, events, 0};
    const int rc = poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the next syscall report the error
  }
}

ExchangeResult Fail(Failure failure, const std::string& path, const std::string& what) {
  ExchangeResult r;
  r.failure = failure;
  r.error = "vgpu-node socket " + path + ": " + what;
  return r;
}

// Reads exactly `n` bytes into `out`. Returns "" or what went wrong; *timed_out on deadline.
std::string ReadExactly(int fd, char* out, size_t n, int64_t deadline_ns, bool* timed_out) {
  size_t got = 0;
  while (got < n) {
    const ssize_t rc = recv(fd, out + got, n - got, 0);
    if (rc > 0) {
      got += static_cast<size_t>(rc);
      continue;
    }
    if (rc == 0) return "connection closed by the daemon after " + std::to_string(got) + " of " + std::to_string(n) + " bytes";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return std::string("receive failed: ") + strerror(errno);
    if (!WaitFor(fd, POLLIN, deadline_ns)) {
      *timed_out = true;
      return "no reply within the timeout";
    }
  }
  return "";
}

}  // namespace

std::string VersionMismatch(const FrameHeader& reply, std::string_view self) {
  if (reply.version == kWireVersion) return "";
  return "answered with protocol version " + std::to_string(reply.version) + " (this " + std::string(self) +
         " speaks " + std::to_string(kWireVersion) + ")";
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ExchangeResult Exchange(const std::string& socket_path, std::string_view frame, int timeout_ms,
                        uint32_t max_reply_payload) {
  const int saved_errno = errno;
  struct RestoreErrno {
    int value;
    ~RestoreErrno() { errno = value; }
  } restore{saved_errno};

  const int64_t deadline_ns = MonotonicNs() + static_cast<int64_t>(timeout_ms > 0 ? timeout_ms : 1) * 1'000'000;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return Fail(Failure::kUnreachable, socket_path, "path is empty or longer than " + std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return Fail(Failure::kUnreachable, socket_path, std::string("socket() failed: ") + strerror(errno));

  // A unix connect either succeeds at once, fails, or (backlog full) says EAGAIN: retry shortly.
  for (;;) {
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EINPROGRESS) {
      if (MsLeft(deadline_ns) <= 0) return Fail(Failure::kTimeout, socket_path, "connect did not complete within the timeout (backlog full)");
      if (errno == EINPROGRESS) {
        if (!WaitFor(fd.get(), POLLOUT, deadline_ns)) return Fail(Failure::kTimeout, socket_path, "connect timed out");
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) break;
        return Fail(Failure::kUnreachable, socket_path, std::string("connect failed: ") + strerror(err));
      }
      struct timespec pause = {0, 200'000};  // 0.2 ms
      nanosleep(&pause, nullptr);
      continue;
    }
    return Fail(Failure::kUnreachable, socket_path, std::string("connect failed: ") + strerror(errno));
  }

  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t rc = send(fd.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (rc > 0) {
      sent += static_cast<size_t>(rc);
      continue;
    }
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd.get(), POLLOUT, deadline_ns)) return Fail(Failure::kTimeout, socket_path, "send timed out");
      continue;
    }
    return Fail(Failure::kProtocol, socket_path, std::string("send failed: ") + strerror(errno));
  }

  unsigned char head[kHeaderBytes];
  bool timed_out = false;
  std::string problem = ReadExactly(fd.get(), reinterpret_cast<char*>(head), kHeaderBytes, deadline_ns, &timed_out);
  if (!problem.empty()) return Fail(timed_out ? Failure::kTimeout : Failure::kProtocol, socket_path, problem);
  ExchangeResult result;
  problem = DecodeHeader(head, max_reply_payload, &result.header);
  if (!problem.empty()) return Fail(Failure::kProtocol, socket_path, "bad reply: " + problem);
  result.payload.resize(result.header.payload_length);
  problem = ReadExactly(fd.get(), result.payload.data(), result.payload.size(), deadline_ns, &timed_out);
  if (!problem.empty()) return Fail(timed_out ? Failure::kTimeout : Failure::kProtocol, socket_path, problem);
  return result;
}

}  // namespace vgpu::wire
