// The registration socket: a unix stream socket served by a few epoll threads.
//
// One connection carries one request frame and gets one reply frame, then is closed. The server
// does the framing and the defences; the handler decides what to answer:
//   - a client must send its whole request within request_timeout (slow or silent clients are
//     closed, so they cannot pin a thread or a slot);
//   - a header that is not a vgpu frame, or announces a payload above kMaxRequestPayload, is
//     answered with an error reply (best effort) and closed without reading the payload;
//   - at most max_connections are open; further ones are closed at once;
//   - the peer's pid/uid/gid come from SO_PEERCRED at accept time.
// Replies are written without blocking; a client that does not read its reply within the
// timeout is dropped.
//
// Startup: an existing socket file with a live listener is an error (another daemon); a stale
// one is replaced; a non-socket file is never deleted. Stop() (any thread) makes the serving
// threads exit, closes every connection and removes the socket file.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "node/container_store.h"
#include "protocol/wire.h"

namespace vgpu::node {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct SocketServerOptions {
  std::string path;
  uint32_t mode = 0666;
  int threads = 2;
  int64_t request_timeout_ms = 1000;
  int max_connections = 1024;
};

// Given the peer and a complete request frame (header checked for magic/reserved/size; version
// and type are the handler's business), returns the complete reply frame.
using FrameHandler = std::function<std::string(const PeerCred& peer, const wire::FrameHeader& header,
                                               std::string_view payload)>;

// Called for each rejected connection/frame (for logs and metrics): reason is one of
// "timeout", "oversized", "bad_frame", "too_many_connections", "peer_closed".
using RejectHook = std::function<void(const PeerCred& peer, const char* reason, const std::string& detail)>;

class SocketServer {
 public:
  SocketServer(SocketServerOptions options, FrameHandler handler, RejectHook on_reject);
  ~SocketServer();  // Stop()s
  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;

  // Binds, listens and starts the threads.
  Status Start();
  void Stop();

  int open_connections() const { return open_.load(); }

 private:
  void Serve(int thread_index);

  const SocketServerOptions options_;
  const FrameHandler handler_;
  const RejectHook on_reject_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd
  std::atomic<int> open_{0};
  std::atomic<bool> stopped_{false};
  std::vector<std::thread> threads_;
};

}  // namespace vgpu::node
