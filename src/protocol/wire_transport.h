// Client side of the registration socket: one request frame out, one reply frame in, over a unix
// stream socket, with one deadline for the whole exchange. Used by libvgpu.so (registration at
// cuInit), the vgpu CLI (node-wide ps/top) and the benchmarks.
//
// Never blocks past the deadline: the socket is non-blocking and every wait is a poll() bounded
// by the time left. Never raises SIGPIPE (send with MSG_NOSIGNAL). No exceptions, no threads,
// no global state; errno is preserved for the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/wire.h"

namespace vgpu::wire {

enum class Failure {
  kNone = 0,
  kUnreachable,  // no socket at the path, nobody listening, or the path is unusable
  kTimeout,      // the deadline passed (connect backlog full, daemon slow or stuck)
  kProtocol,     // the peer closed early or sent something that is not a valid frame
};

struct ExchangeResult {
  Failure failure = Failure::kNone;
  std::string error;   // empty when failure == kNone; else names the socket and the problem
  FrameHeader header;  // of the reply
  std::string payload;
  bool ok() const { return failure == Failure::kNone; }
};

// Connects to `socket_path`, writes `frame`, reads one reply frame whose payload is at most
// `max_reply_payload` bytes, and closes. timeout_ms > 0 bounds everything together.
// The reply's magic, reserved field and length are checked (kProtocol otherwise); its version and
// type are the caller's to check: a reply of another version is a protocol failure (wire.h).
ExchangeResult Exchange(const std::string& socket_path, std::string_view frame, int timeout_ms,
                        uint32_t max_reply_payload);

// "" when a reply's header is of kWireVersion; else "answered with protocol version N (this
// <self> speaks 1)", for the caller to put after the daemon's name.
std::string VersionMismatch(const FrameHeader& reply, std::string_view self);

// CLOCK_MONOTONIC in nanoseconds (for deadlines and latency measurements).
int64_t MonotonicNs();

}  // namespace vgpu::wire
