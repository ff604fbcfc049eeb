#include "node/socket_server.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>

#include "protocol/wire_transport.h"

namespace vgpu::node {
namespace {

struct Connection {
  int fd = -1;
  PeerCred peer;
  int64_t deadline_ns = 0;
  unsigned char head[wire::kHeaderBytes] = {};
  size_t head_got = 0;
  wire::FrameHeader header;
  std::string payload;
  size_t payload_got = 0;
  std::string reply;  // non-empty once answered
  size_t reply_sent = 0;
  bool close_after_reply = true;
};

std::string ErrorFrame(wire::Status status, const std::string& message) {
  wire::ErrorReply e;
  e.status = status;
  e.message = message;
  return wire::EncodeFrame(wire::MessageType::kErrorReply, wire::EncodeErrorReply(e));
}

// Whether something listens on the unix socket at `path`.
bool SomeoneListens(const std::string& path) {
  const wire::ExchangeResult r = wire::Exchange(path, std::string_view(), 50, 0);
  // An empty frame is never answered; connect success is what we want to know.
  return r.failure != wire::Failure::kUnreachable;
}

}  // namespace

SocketServer::SocketServer(SocketServerOptions options, FrameHandler handler, RejectHook on_reject)
    : options_(std::move(options)), handler_(std::move(handler)), on_reject_(std::move(on_reject)) {}

SocketServer::~SocketServer() { Stop(); }

Status SocketServer::Start() {
  const std::string& path = options_.path;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::Error("socket " + path + ": path empty or longer than " + std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  memcpy(addr.sun_path, path.data(), path.size());
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::Error("socket " + path + ": exists and is not a socket (not touching it)");
    if (SomeoneListens(path)) return Status::Error("socket " + path + ": another daemon is listening on it");
    unlink(path.c_str());  // stale, from a daemon that did not shut down cleanly
  }
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::Error(std::string("socket(): ") + strerror(errno));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return Status::Error("socket " + path + ": bind: " + why);
  }
  chmod(path.c_str(), options_.mode);
  if (listen(listen_fd_, 4096) != 0) {
    const std::string why = strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(path.c_str());
    return Status::Error("socket " + path + ": listen: " + why);
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Serve(i); });
  return Status::Ok();
}

void SocketServer::Stop() {
  if (stopped_.exchange(true)) return;
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(options_.path.c_str());
  }
  if (stop_fd_ >= 0) {
    close(stop_fd_);
    stop_fd_ = -1;
  }
}

void SocketServer::Serve(int thread_index) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return;
  struct epoll_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;  // one thread woken per incoming connection
  ev.data.fd = listen_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.events = EPOLLIN;
  ev.data.fd = stop_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &ev);

  std::map<int, std::unique_ptr<Connection>> conns;
  const int64_t timeout_ns = options_.request_timeout_ms * 1'000'000;

  auto drop = [&](Connection* c, const char* reason, const std::string& detail) {
    if (reason != nullptr && on_reject_) on_reject_(c->peer, reason, detail);
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    open_.fetch_sub(1);
    conns.erase(c->fd);
  };

  // Writes what is left of the reply; true when the connection is finished (and was dropped).
  auto flush = [&](Connection* c) -> bool {
    while (c->reply_sent < c->reply.size()) {
      const ssize_t n = send(c->fd, c->reply.data() + c->reply_sent, c->reply.size() - c->reply_sent, MSG_NOSIGNAL);
      if (n > 0) {
        c->reply_sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        struct epoll_event w;
        memset(&w, 0, sizeof(w));
        w.events = EPOLLOUT;
        w.data.fd = c->fd;
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &w);
        return false;
      }
      drop(c, "peer_closed", "while sending the reply");
      return true;
    }
    drop(c, nullptr, "");
    return true;
  };

  auto answer = [&](Connection* c, std::string frame) {
    c->reply = std::move(frame);
    flush(c);
  };

  // Reads what the peer sent; answers when the frame is complete.
  auto on_readable = [&](Connection* c) {
    for (;;) {
      if (c->head_got < wire::kHeaderBytes) {
        const ssize_t n = recv(c->fd, c->head + c->head_got, wire::kHeaderBytes - c->head_got, 0);
        if (n > 0) {
          c->head_got += static_cast<size_t>(n);
          if (c->head_got < wire::kHeaderBytes) continue;
          const std::string bad = wire::DecodeHeader(c->head, wire::kMaxRequestPayload, &c->header);
          if (!bad.empty()) {
            const bool oversized = c->header.magic == wire::kMagic && c->header.reserved == 0 &&
                                   c->header.payload_length > wire::kMaxRequestPayload;
            if (on_reject_) on_reject_(c->peer, oversized ? "oversized" : "bad_frame", bad);
            answer(c, ErrorFrame(wire::Status::kMalformed, bad));
            return;
          }
          c->payload.resize(c->header.payload_length);
          if (c->header.payload_length == 0) break;
          continue;
        }
        if (n == 0) return drop(c, c->head_got == 0 ? nullptr : "peer_closed", "truncated header");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return drop(c, "peer_closed", strerror(errno));
      }
      if (c->payload_got < c->payload.size()) {
        const ssize_t n = recv(c->fd, c->payload.data() + c->payload_got, c->payload.size() - c->payload_got, 0);
        if (n > 0) {
          c->payload_got += static_cast<size_t>(n);
          if (c->payload_got < c->payload.size()) continue;
          break;
        }
        if (n == 0) return drop(c, "peer_closed", "truncated payload");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return drop(c, "peer_closed", strerror(errno));
      }
      break;
    }
    // Complete: stop reading (more bytes after the frame are ignored) and answer.
    answer(c, handler_(c->peer, c->header, c->payload));
  };

  auto accept_all = [&] {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;  // EAGAIN: another thread took it, or none left
      }
      PeerCred peer;
      struct ucred cred;
      socklen_t len = sizeof(cred);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        peer.pid = cred.pid;
        peer.uid = cred.uid;
        peer.gid = cred.gid;
      }
      if (open_.fetch_add(1) >= options_.max_connections) {
        open_.fetch_sub(1);
        if (on_reject_) on_reject_(peer, "too_many_connections", "");
        close(fd);
        continue;
      }
      auto c = std::make_unique<Connection>();
      c->fd = fd;
      c->peer = peer;
      c->deadline_ns = wire::MonotonicNs() + timeout_ns;
      struct epoll_event e;
      memset(&e, 0, sizeof(e));
      e.events = EPOLLIN | EPOLLRDHUP;
      e.data.fd = fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
      Connection* raw = c.get();
      conns[fd] = std::move(c);
      on_readable(raw);  // the request is usually there already
    }
  };

  struct epoll_event events[64];
  for (;;) {
    int wait_ms = 200;
    const int64_t now = wire::MonotonicNs();
    for (const auto& [fd, c] : conns) {
      const int64_t left_ms = (c->deadline_ns - now) / 1'000'000 + 1;
      wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(wait_ms, left_ms)));
    }
    const int n = epoll_wait(ep, events, 64, wait_ms);
    if (n < 0 && errno != EINTR) break;
    bool stop = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) {
        stop = true;
        continue;
      }
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      const auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Connection* c = it->second.get();
      if (!c->reply.empty()) {
        flush(c);
      } else {
        on_readable(c);
      }
    }
    if (stop) break;
    const int64_t after = wire::MonotonicNs();
    std::vector<Connection*> expired;
    for (const auto& [fd, c] : conns) {
      if (after >= c->deadline_ns) expired.push_back(c.get());
    }
    for (Connection* c : expired) {
      drop(c, "timeout", c->reply.empty() ? "request not complete within the timeout" : "reply not read within the timeout");
    }
  }
  for (auto& [fd, c] : conns) {
    close(fd);
    open_.fetch_sub(1);
  }
  conns.clear();
  close(ep);
  (void)thread_index;
}

}  // namespace vgpu::node
