// The registration decision: who is calling (SO_PEERCRED pid + /proc), which container they
// claim, whether they live in its cgroup, and the answer (host pid, ledger, limits).
//
// Decision, in order (the first failure refuses, with a message naming the input):
//   1. the caller's host pid must exist under proc_root (it is the socket peer, so it does);
//   2. the claimed pod uid must be non-empty; with a container name the record
//      <pod-uid>_<name> must exist (an unknown key is re-read from disk once, so a container
//      created a moment ago by `vgpu-node container add` or a mode module is found); without a
//      name the pod must have exactly one container record;
//   3. the record must be readable and not released;
//   4. the caller's container cgroup (procfs.h) must lie in the record's explicit cgroup, or
//      name the record's pod;
//   5. (Kubernetes records, no explicit cgroup) the record is pinned to the cgroup of its first
//      registered process; a later caller must be in that cgroup or below while it exists; once
//      it is gone (the container restarted) the next caller re-pins it. This keeps a sibling
//      container of the same pod from registering into another container's ledger.
//   6. a non-root caller must be able to charge the ledger, which the daemon creates root-owned
//      0644 (never group/other-writable: the ledger refuses writers of such files): the first
//      non-root caller is made its owner (chown to its uid and gid, as SO_PEERCRED reports them
//      in the daemon's user namespace); a later caller of another non-root uid is refused, since
//      it could not open the ledger for writing. Root callers change nothing (docs/node.md,
//      "Who may write a ledger").
// On success the registration is remembered (Registry) and the reply carries the host pid, the
// ledger path the caller can open (the host path when the caller shares the daemon's mount
// namespace, else container_ledger_path), the container key and the ledger's limits.
//
// Thread safety: Handle may run on several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "node/container_store.h"
#include "node/procfs.h"
#include "node/slog.h"
#include "node/socket_server.h"
#include "protocol/wire.h"

namespace vgpu::node {

struct Registration {
  int32_t host_pid = 0;
  uint64_t start_time = 0;
  int32_t ns_pid = 0;  // the pid the caller reported (its own namespace)
  std::string key;
  uint64_t registered_unix = 0;
};

// Registered processes by host pid. Thread-safe.
class Registry {
 public:
  void Add(const Registration& r);
  // Whether host_pid is registered with that start time (0 = any).
  bool Has(int32_t host_pid, uint64_t start_time) const;
  std::vector<Registration> All() const;
  size_t CountFor(const std::string& key) const;
  // Drops entries whose process is gone; returns how many.
  size_t Prune(const ProcFs& procfs);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int32_t, Registration> by_pid_;  // guarded by mu_
};

wire::Limits WireLimits(const ledger::LimitSet& limits);

class Registrar {
 public:
  Registrar(ContainerStore& store, Registry& registry, const ProcFs& procfs, std::string container_ledger_path,
            Logger& log);

  wire::RegisterReply Handle(const PeerCred& peer, const wire::RegisterRequest& request);

 private:
  wire::RegisterReply Refuse(const PeerCred& peer, const wire::RegisterRequest& request, std::string why);
  // Step 2: the record for the claim, or "" with *why.
  std::optional<ContainerRecord> Resolve(const wire::RegisterRequest& request, std::string* why);

  // Step 6: "" when the caller can charge the record's ledger (after giving it the ledger when
  // it is the first non-root caller), else why not.
  std::string GrantLedger(const ContainerRecord& record, const PeerCred& peer);

  ContainerStore& store_;
  Registry& registry_;
  const ProcFs& procfs_;
  const std::string container_ledger_path_;
  Logger& log_;
  const std::string own_mount_ns_;
  std::mutex pin_mu_;  // serialises pin decisions
  std::mutex grant_mu_;  // serialises ledger ownership changes
  std::atomic<int64_t> last_rescan_ns_{0};  // a claim for an unknown pod rescans at most once a second
};

}  // namespace vgpu::node
