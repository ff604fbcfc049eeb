// Registration of this process with the node daemon (vgpu-node), at the first cuInit or nvmlInit
// (an NVML-only process, such as a monitoring agent or nvidia-smi in the container, registers too:
// its memory queries then show the limits of the ledger the daemon names).
//
// What it is for: inside a container the process's pid is not the pid the host and NVML see. The
// daemon reads the caller's host pid from the socket (SO_PEERCRED), checks that the caller lives
// in the claimed container's cgroup, and answers with the host pid, the container's ledger and
// its authoritative limits. The library then registers its ledger slot with that host pid and
// finds itself in NVML's per-process list by it.
//
// Policy (docs/node.md, "Library policy"), all decided once per process:
//   VGPU_SOCKET unset or empty          no registration; nothing is attempted.
//   the daemon answers ok               registered: HostPid()/LedgerPath() give its answer.
//   the daemon refuses the identity     cuInit is refused (CUDA_ERROR_NOT_PERMITTED; nvmlInit:
//                                       NVML_ERROR_NO_PERMISSION), always:
//                                       the daemon says this process is not who it claims.
//   unreachable, timeout, bad reply     with VGPU_REGISTRATION_REQUIRED=true: cuInit/nvmlInit refused;
//                                       otherwise (default) one error line on stderr and the
//                                       process continues with its environment's limits and
//                                       ledger (never unlimited: the ledger still enforces).
//   a malformed VGPU_* value            cuInit/nvmlInit refused, naming the variable.
// The exchange is bounded by VGPU_REGISTRATION_TIMEOUT_MS (default 2000, 1..60000): never a hang.
//
// Thread safety: RegisterAtInit may be called from any thread, any number of times; the
// first call of each process (pid) does the work, later ones return the same decision. A fork()
// child registers afresh at its own cuInit/nvmlInit. No exceptions; not a hot path (initialisation only).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/wire.h"

namespace vgpu::registration {

inline constexpr int kDefaultTimeoutMs = 2000;
inline constexpr int kMaxTimeoutMs = 60000;

struct Settings {
  std::string socket;          // VGPU_SOCKET; empty = do not register
  std::string pod_uid;         // VGPU_POD_UID; empty = from /proc/self/cgroup when possible
  std::string container_name;  // VGPU_CONTAINER_NAME; may be empty
  int timeout_ms = kDefaultTimeoutMs;  // VGPU_REGISTRATION_TIMEOUT_MS
  bool required = false;               // VGPU_REGISTRATION_REQUIRED
  std::vector<std::string> errors;     // one line per malformed variable
};

// Reads the variables above through `env` (nullptr = unset). Pure.
Settings ParseSettings(const std::function<const char*(const char*)>& env);

// The Kubernetes pod UID in a /proc/<pid>/cgroup text ("pod<uuid>" in a path component, with '-'
// or '_' separators, cgroupfs or systemd driver), normalised to dashes; "" when there is none.
std::string PodUidFromCgroup(std::string_view cgroup_text);

enum class Outcome {
  kSkipped,     // VGPU_SOCKET unset
  kRegistered,  // the daemon accepted
  kContinued,   // the daemon could not be reached / answered garbage; continuing (policy)
  kRefused,     // refused by the daemon, or unreachable with VGPU_REGISTRATION_REQUIRED, or bad settings
};

struct Result {
  Outcome outcome = Outcome::kSkipped;
  std::string message;       // for the log: why refused / continued
  wire::RegisterReply reply;  // valid when kRegistered
};

// One registration attempt with explicit inputs (the testable core of RegisterAtInit).
// `cgroup_text` is this process's /proc/self/cgroup (used only when settings.pod_uid is empty).
Result Register(const Settings& settings, pid_t pid, std::string_view cgroup_text);

// Process-wide: reads the environment, registers once per pid and logs the outcome.
// Returns false (with *error) when the initialisation (cuInit, nvmlInit*) must be refused.
bool RegisterAtInit(std::string* error);

// The host pid from the daemon's answer, else getpid().
int32_t HostPid();
// The ledger path from the daemon's answer, else "".
std::string LedgerPath();
// Whether this process registered and the daemon named a ledger: one atomic load, no lock and no
// system call (for query hooks that must stay cheap when no limit applies).
bool HasLedger();

}  // namespace vgpu::registration
