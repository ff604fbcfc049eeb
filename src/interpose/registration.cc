#include "interpose/registration.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <mutex>

#include "common/config.h"
#include "common/log.h"
#include "protocol/wire_transport.h"

namespace vgpu::registration {

namespace {

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" with '-' or '_' as separators, at `p`.
bool LooksLikeUuid(std::string_view s) {
  if (s.size() < 36) return false;
  for (size_t i = 0; i < 36; ++i) {
    const bool separator = i == 8 || i == 13 || i == 18 || i == 23;
    if (separator ? (s[i] != '-' && s[i] != '_') : !IsHex(s[i])) return false;
  }
  return true;
}

std::string ReadSmallFile(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[1024];
  while (text.size() < 64 * 1024) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

// Process-wide state; never destroyed (hooks may run during exit).
struct State {
  std::mutex mu;
  pid_t done_for_pid = 0;      // guarded by mu: the pid whose decision is cached
  bool allowed = true;         // guarded by mu
  std::string refusal;         // guarded by mu
  std::string ledger_path;     // guarded by mu
  std::atomic<int32_t> host_pid{0};  // 0 = not registered (use getpid())
  std::atomic<bool> has_ledger{false};  // ledger_path is set (lock-free check for query hooks)
};

alignas(State) unsigned char g_storage[sizeof(State)];
State* g_state = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void InitState() {
  g_state = new (g_storage) State();
  pthread_atfork(nullptr, nullptr, [] {
    // The child is another process: it registers itself at its own cuInit/nvmlInit.
    new (&g_state->mu) std::mutex();
    g_state->done_for_pid = 0;
    g_state->host_pid.store(0);
    g_state->has_ledger.store(false);
    g_state->ledger_path.clear();
  });
}

State& S() {
  pthread_once(&g_once, InitState);
  return *g_state;
}

std::string DescribeLimits(const wire::Limits& l) {
  std::string text = "memory " + (l.default_memory_limit ? FormatSize(l.default_memory_limit) : std::string("unlimited")) +
                     ", compute " + (l.default_sm_limit ? std::to_string(l.default_sm_limit) + "%" : std::string("unlimited"));
  for (const wire::DeviceLimits& d : l.devices) {
    text += "; device " + (d.ordinal >= 0 ? std::to_string(d.ordinal) : d.uuid) + ": memory " +
            (d.memory_limit ? FormatSize(d.memory_limit) : std::string("unlimited")) + ", compute " +
            (d.sm_limit ? std::to_string(d.sm_limit) + "%" : std::string("unlimited"));
  }
  return text;
}

}  // namespace

Settings ParseSettings(const std::function<const char*(const char*)>& env) {
  Settings s;
  auto value = [&](const char* name) -> std::string {
    const char* v = env(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  s.socket = value("VGPU_SOCKET");
  s.pod_uid = value("VGPU_POD_UID");
  s.container_name = value("VGPU_CONTAINER_NAME");
  if (!s.socket.empty() && s.socket[0] != '/') {
    s.errors.push_back("invalid VGPU_SOCKET=\"" + s.socket + "\": expected an absolute path");
  }
  for (const char* name : {"VGPU_POD_UID", "VGPU_CONTAINER_NAME"}) {
    const std::string v = value(name);
    if (v.size() > 253) s.errors.push_back(std::string("invalid ") + name + ": longer than 253 characters");
    for (char c : v) {
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e || c == '/') {
        s.errors.push_back(std::string("invalid ") + name + "=\"" + v + "\": expected printable ASCII without blanks or '/'");
        break;
      }
    }
  }
  if (const std::string t = value("VGPU_REGISTRATION_TIMEOUT_MS"); !t.empty()) {
    char* end = nullptr;
    errno = 0;
    const long ms = strtol(t.c_str(), &end, 10);
    if (errno != 0 || end == t.c_str() || *end != '\0' || ms < 1 || ms > kMaxTimeoutMs) {
      s.errors.push_back("invalid VGPU_REGISTRATION_TIMEOUT_MS=\"" + t + "\": expected milliseconds 1.." +
                         std::to_string(kMaxTimeoutMs));
    } else {
      s.timeout_ms = static_cast<int>(ms);
    }
  }
  if (const std::string r = value("VGPU_REGISTRATION_REQUIRED"); !r.empty()) {
    const std::optional<bool> b = ParseBool(r);
    if (!b) {
      s.errors.push_back("invalid VGPU_REGISTRATION_REQUIRED=\"" + r + "\": expected true or false");
    } else {
      s.required = *b;
    }
  }
  return s;
}

std::string PodUidFromCgroup(std::string_view text) {
  for (size_t at = text.find("pod"); at != std::string_view::npos; at = text.find("pod", at + 3)) {
    const std::string_view rest = text.substr(at + 3);
    if (!LooksLikeUuid(rest)) continue;
    const char after = rest.size() > 36 ? rest[36] : '\n';
    if (IsHex(after) || after == '-' || after == '_') continue;  // longer than a uuid
    std::string uid(rest.substr(0, 36));
    for (char& c : uid) {
      if (c == '_') c = '-';
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return uid;
  }
  return "";
}

Result Register(const Settings& settings, pid_t pid, std::string_view cgroup_text) {
  Result result;
  if (!settings.errors.empty()) {
    result.outcome = Outcome::kRefused;
    for (const std::string& e : settings.errors) result.message += (result.message.empty() ? "" : "; ") + e;
    return result;
  }
  if (settings.socket.empty()) return result;  // kSkipped

  wire::RegisterRequest request;
  request.pod_uid = settings.pod_uid.empty() ? PodUidFromCgroup(cgroup_text) : settings.pod_uid;
  request.container_name = settings.container_name;
  request.pid = static_cast<uint32_t>(pid);
  request.client = "libvgpu";
  const std::string frame = wire::EncodeFrame(wire::MessageType::kRegisterRequest, wire::EncodeRegisterRequest(request));
  const wire::ExchangeResult exchange =
      wire::Exchange(settings.socket, frame, settings.timeout_ms, wire::kMaxReplyPayload);

  std::string problem;
  if (!exchange.ok()) {
    problem = exchange.error;
  } else if (const std::string other = wire::VersionMismatch(exchange.header, "library"); !other.empty()) {
    problem = "vgpu-node " + other;
  } else if (exchange.header.type == wire::MessageType::kErrorReply) {
    wire::ErrorReply error;
    const std::string bad = wire::DecodeErrorReply(exchange.payload, &error);
    problem = "vgpu-node could not read the request: " + (bad.empty() ? error.message : bad);
  } else if (exchange.header.type != wire::MessageType::kRegisterReply) {
    problem = "vgpu-node answered with message type " + std::to_string(static_cast<int>(exchange.header.type));
  } else if (const std::string bad = wire::DecodeRegisterReply(exchange.payload, &result.reply); !bad.empty()) {
    problem = "malformed reply from vgpu-node: " + bad;
  } else if (result.reply.status != wire::Status::kOk) {
    // An explicit answer: the daemon does not accept this identity. Never continue.
    result.outcome = Outcome::kRefused;
    result.message = std::string("vgpu-node refused the registration (") + wire::StatusName(result.reply.status) +
                     "): " + result.reply.message;
    return result;
  } else {
    result.outcome = Outcome::kRegistered;
    return result;
  }
  if (settings.required) {
    result.outcome = Outcome::kRefused;
    result.message = problem + " (VGPU_REGISTRATION_REQUIRED is set)";
  } else {
    result.outcome = Outcome::kContinued;
    result.message = problem;
  }
  return result;
}

bool RegisterAtInit(std::string* error) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const pid_t pid = getpid();
  if (s.done_for_pid == pid) {
    if (!s.allowed) *error = s.refusal;
    return s.allowed;
  }
  const Settings settings = ParseSettings([](const char* name) { return getenv(name); });
  const std::string cgroup = settings.pod_uid.empty() && !settings.socket.empty() ? ReadSmallFile("/proc/self/cgroup") : "";
  const Result result = Register(settings, pid, cgroup);
  s.done_for_pid = pid;
  s.allowed = result.outcome != Outcome::kRefused;
  switch (result.outcome) {
    case Outcome::kSkipped:
      break;
    case Outcome::kRegistered:
      s.host_pid.store(static_cast<int32_t>(result.reply.host_pid));
      s.ledger_path = result.reply.ledger_path;
      s.has_ledger.store(!s.ledger_path.empty(), std::memory_order_release);
      VGPU_INFO("registered with vgpu-node as container %s: host pid %u, ledger %s, limits %s",
                result.reply.container_key.c_str(), result.reply.host_pid, result.reply.ledger_path.c_str(),
                DescribeLimits(result.reply.limits).c_str());
      break;
    case Outcome::kContinued:
      VGPU_LOG_UNLIMITED(LogLevel::kError,
                         "warning: registration with vgpu-node failed: %s; continuing with the limits of the "
                         "environment and ledger (set VGPU_REGISTRATION_REQUIRED=true to refuse CUDA instead)",
                         result.message.c_str());
      break;
    case Outcome::kRefused:
      s.refusal = result.message;
      *error = result.message;
      break;
  }
  return s.allowed;
}

int32_t HostPid() {
  const int32_t host = S().host_pid.load(std::memory_order_relaxed);
  return host > 0 ? host : static_cast<int32_t>(getpid());
}

bool HasLedger() { return S().has_ledger.load(std::memory_order_acquire); }

std::string LedgerPath() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done_for_pid == getpid() ? s.ledger_path : std::string();
}

}  // namespace vgpu::registration
