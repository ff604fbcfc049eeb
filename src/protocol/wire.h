// The registration protocol between libvgpu.so (and the vgpu CLI) and vgpu-node: framing and the
// typed messages. docs/node.md ("Registration protocol") is the specification; this header,
// wire.cc and wire_transport.h are its only implementation, shared by the library, the CLI and
// the daemon. It lives below all three (src/protocol): nothing here knows the daemon, the
// library or the CLI.
//
// Frame (all integers little-endian):
//   offset 0  u32 magic            0x52504756 (the bytes "VGPR")
//          4  u16 version          kWireVersion (1)
//          6  u16 type             MessageType
//          8  u32 payload_length   bytes that follow the 16-byte header
//         12  u32 reserved         0
//   payload: a sequence of fields, each u16 tag, u16 length, `length` bytes of value.
//   Integer values are fixed width (u32: 4 bytes, u64: 8 bytes, i32: 4 bytes two's complement);
//   strings are bytes without NUL, at most kMaxStringBytes; nested values (limits, devices,
//   containers, GPUs, findings) are themselves field sequences. Unknown tags are skipped (so a
//   newer peer of the same version can add fields); a known tag with a wrong width, a repeated
//   singular field, a missing required field or a string with a NUL byte is malformed.
//
// Contract.
//   Exchange: over a unix stream socket, the client sends one request frame, the daemon answers
//   with one reply frame and closes the connection. One exchange per connection.
//   Versions: there is one version, kWireVersion = 1, in every frame header. Adding a field with a
//   new tag keeps the version (older peers skip it); a change that an older peer cannot ignore
//   (a new meaning, width or requirement for an existing tag, a new framing) takes a new version.
//   Each side speaks exactly one version and never guesses: the daemon answers a request of
//   another version with an ErrorReply (kUnsupportedVersion, its own version in the message); a
//   client treats a reply of another version as a protocol failure.
//   What the client (libvgpu.so, the CLI) may assume of a reply that decodes:
//     - RegisterReply with kOk: host_pid (> 0) and ledger_path are present (the decoder checks);
//       limits are the container's authoritative limits (those in the ledger at ledger_path). Any
//       other status, a value this side does not know included: only `message` (the reason) is
//       meaningful, and nothing was registered.
//     - QueryReply: at most 4096 containers, 64 GPUs and 4096 bypass findings; 4 MiB in all.
//     - ErrorReply: the daemon could not use the request (bad frame, version, type or payload);
//       nothing was registered.
//   What the daemon may assume of a request that decodes: nothing about the caller's identity.
//   RegisterRequest.pid, pod_uid and container_name are claims; the caller's host pid comes from
//   the socket (SO_PEERCRED) and the claims are checked against its cgroup (docs/node.md, "What
//   the daemon checks"). A request is at most kMaxRequestPayload bytes; a larger one is refused
//   unread.
//   Errors: decoders return "" or a sentence naming the field and what is wrong; the Status in a
//   reply says which side failed (numeric values are part of the protocol, see Status). Transport
//   failures (unreachable, timeout, invalid frame) are reported by Exchange (wire_transport.h).
//
// Every decoder here is total: any byte sequence yields either a message or an error string, never
// a crash, an exception or an unbounded allocation (lengths are checked against what is there).
//
// Dependencies: the C++ standard library only. Built without exceptions (it is linked into
// libvgpu.so). Thread safety: pure functions over their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vgpu::wire {

inline constexpr uint32_t kMagic = 0x52504756;  // "VGPR" as little-endian bytes
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 16;
// A request larger than this is refused unread (the daemon closes the connection).
inline constexpr uint32_t kMaxRequestPayload = 4096;
// Replies may list a node's containers (Query): bounded at 4 MiB.
inline constexpr uint32_t kMaxReplyPayload = 4u << 20;
inline constexpr size_t kMaxStringBytes = 1024;

enum class MessageType : uint16_t {
  kRegisterRequest = 1,
  kRegisterReply = 2,
  kQueryRequest = 3,
  kQueryReply = 4,
  kErrorReply = 5,  // the daemon could not read the request (bad frame, version, type)
};

// Status of a reply. Numeric values are part of the protocol.
enum class Status : uint32_t {
  kOk = 0,
  kRefused = 1,             // identity not accepted (cgroup mismatch, unknown container, ...)
  kMalformed = 2,           // the request could not be decoded
  kUnsupportedVersion = 3,  // frame version other than kWireVersion
  kUnsupportedType = 4,     // a message type the daemon does not serve
  kInternal = 5,            // the daemon failed (its log says why)
};
const char* StatusName(Status status);  // "ok", "refused", ...

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kWireVersion;
  MessageType type = MessageType::kErrorReply;
  uint32_t payload_length = 0;
  uint32_t reserved = 0;
};

// Encodes the 16-byte header.
void EncodeHeader(const FrameHeader& header, unsigned char out[kHeaderBytes]);
// Decodes and checks the header: magic, reserved = 0, payload_length <= max_payload. The version
// is NOT checked here (the caller answers kUnsupportedVersion with its own version). "" = ok.
std::string DecodeHeader(const unsigned char in[kHeaderBytes], uint32_t max_payload, FrameHeader* header);

// A whole frame: header + payload.
std::string EncodeFrame(MessageType type, std::string_view payload);

// --- messages ------------------------------------------------------------------------------

// Request, sent by the library at its first cuInit. The caller's host pid comes from the socket
// (SO_PEERCRED), never from this message.
struct RegisterRequest {
  std::string pod_uid;         // from VGPU_POD_UID, else from the caller's cgroup; may be empty
  std::string container_name;  // from VGPU_CONTAINER_NAME; may be empty
  uint32_t pid = 0;            // getpid() in the caller's pid namespace (required, > 0)
  std::string client;          // "libvgpu 0.1.0"
};

struct DeviceLimits {
  int32_t ordinal = -1;
  std::string uuid;
  uint64_t memory_limit = 0;
  uint32_t sm_limit = 0;
  uint32_t sm_soft_limit = 0;
};

struct Limits {
  uint64_t default_memory_limit = 0;
  uint32_t default_sm_limit = 0;
  uint32_t default_sm_soft_limit = 0;
  uint32_t task_priority = 1;
  std::vector<DeviceLimits> devices;  // at most 64
};

struct RegisterReply {
  Status status = Status::kOk;
  std::string message;        // why, when status != kOk; may be empty otherwise
  uint32_t host_pid = 0;      // the caller's pid as the host (and NVML) sees it
  std::string ledger_path;    // the container's ledger, as a path the caller can open
  std::string container_key;  // "<pod-uid>_<container-name>"
  Limits limits;              // the authoritative limits (as in the ledger)
};

// Node-wide view, for `vgpu ps` / `vgpu top`. Served only to callers in the daemon's own pid
// namespace (host processes).
struct QueryRequest {};

struct ContainerInfo {
  std::string key;
  std::string pod_uid;
  std::string container_name;
  std::string ns;        // Kubernetes namespace, when the mode module knows it
  std::string pod_name;  // when known
  std::string ledger_path;  // host path
  std::string cgroup;       // explicit cgroup, or the pinned one, or ""
  std::string state;        // "active", "released", "error: ..."
  uint32_t registered = 0;  // live registered processes
};

struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  uint32_t utilization = 0;  // percent
  uint32_t healthy = 1;      // 1 healthy, 0 unhealthy
  std::string health_reason;
};

struct BypassInfo {
  uint32_t host_pid = 0;
  std::string container_key;
  std::string gpu_uuid;
  uint64_t memory = 0;
  uint64_t first_seen_unix = 0;
  std::string comm;
};

struct QueryReply {
  Status status = Status::kOk;
  std::string message;
  std::string node;
  std::vector<ContainerInfo> containers;
  std::vector<GpuInfo> gpus;
  std::vector<BypassInfo> bypass;
};

struct ErrorReply {
  Status status = Status::kInternal;
  std::string message;
};

// Payload encoders (append nothing else; wrap with EncodeFrame).
std::string EncodeRegisterRequest(const RegisterRequest& m);
std::string EncodeRegisterReply(const RegisterReply& m);
std::string EncodeQueryReply(const QueryReply& m);
std::string EncodeErrorReply(const ErrorReply& m);

// Payload decoders: "" on success, else what is wrong ("field 3 (pid): expected 4 bytes, got 2").
std::string DecodeRegisterRequest(std::string_view payload, RegisterRequest* m);
std::string DecodeRegisterReply(std::string_view payload, RegisterReply* m);
std::string DecodeQueryReply(std::string_view payload, QueryReply* m);
std::string DecodeErrorReply(std::string_view payload, ErrorReply* m);

}  // namespace vgpu::wire
