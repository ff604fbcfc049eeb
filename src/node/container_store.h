// The ledger-directory manager: one directory per limited container under
// <state_dir>/containers/<key>/, key = "<pod-uid>_<container-name>", holding
//   record   the container's identity (file format below), written by the daemon only;
//   ledger   the container's ledger (docs/ledger.md), limits written by the daemon
//            (authority "node daemon"), charged by the container's processes.
// The directory is the source of truth: a restarted daemon rebuilds everything from it (Rescan),
// and `vgpu-node container add` (or a mode module) may create entries while the daemon runs.
//
// Record file (text, one `key = value` per line, '#' comments; unknown keys are kept unread so a
// newer daemon may add some):
//   version = 1
//   pod_uid = <uid>            container_name = <name>
//   namespace = <ns>           pod_name = <name>            (optional, for metrics labels)
//   cgroup = </path>           explicit cgroup (non-Kubernetes groups); empty = match the pod uid
//   pinned_cgroup = </path>    the cgroup of the first registered process (set by the daemon)
//   created_unix = <seconds>   released_unix = <seconds, 0 = not released>
//
// Thread safety: all methods may be called concurrently (one internal mutex; file writes happen
// under it). Errors are values: Status with a message naming the path.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger.h"

namespace vgpu::node {

struct Status {
  bool ok = true;
  std::string message;
  static Status Ok() { return {}; }
  static Status Error(std::string m) { return {false, std::move(m)}; }
};

// What a mode module (or `vgpu-node container add`) asks for.
struct ContainerSpec {
  std::string pod_uid;
  std::string container_name;
  std::string ns;        // optional
  std::string pod_name;  // optional
  std::string cgroup;    // optional explicit cgroup (absolute cgroup path, e.g. "/vgpu/job1")
  ledger::LimitSet limits;  // authority is forced to kNodeDaemon
};

struct ContainerRecord {
  std::string key;
  std::string dir;  // <containers_dir>/<key>
  std::string pod_uid;
  std::string container_name;
  std::string ns;
  std::string pod_name;
  std::string cgroup;
  std::string pinned_cgroup;
  uint64_t created_unix = 0;
  uint64_t released_unix = 0;
  std::string error;        // non-empty: the record or ledger could not be read; not served
  ledger::LimitSet limits;  // as in the ledger (cached; only the daemon writes them)

  std::string LedgerPath() const { return dir + "/ledger"; }
  std::string RecordPath() const { return dir + "/record"; }
  bool released() const { return released_unix != 0; }
  // The cgroup this container's processes must live in: explicit, else pinned, else "".
  const std::string& EffectiveCgroup() const { return !cgroup.empty() ? cgroup : pinned_cgroup; }
};

// "" when pod uid / container name can form a key, else why not.
std::string ValidateIdentity(const std::string& pod_uid, const std::string& container_name);
std::string ContainerKey(const std::string& pod_uid, const std::string& container_name);

// Record file text <-> record (pure; ParseRecord returns "" or what is wrong).
std::string FormatRecord(const ContainerRecord& record);
std::string ParseRecord(const std::string& text, ContainerRecord* record);

class ContainerStore {
 public:
  explicit ContainerStore(std::string containers_dir);

  // Creates the containers directory (0755) if missing.
  Status Init();

  // Creates the container's directory, record and ledger, or updates an existing one's
  // identity fields and limits (charges and pins are kept; a released container is revived).
  Status Ensure(const ContainerSpec& spec, ContainerRecord* out = nullptr);
  // Marks the container released: it is removed once no process of it is alive.
  Status Release(const std::string& key);
  // Deletes the directory (ledger, record). The caller checked that nobody uses it.
  Status Remove(const std::string& key);
  // Records the cgroup of the first registered process.
  Status Pin(const std::string& key, const std::string& cgroup);

  // Re-reads every directory (new ones appear, vanished ones disappear, unreadable ones are kept
  // with `error`). Returns the number of records.
  size_t Rescan();
  // Re-reads one directory (a registration for a key not yet known); false when it is absent.
  bool Load(const std::string& key);

  std::optional<ContainerRecord> Get(const std::string& key) const;
  std::vector<ContainerRecord> List() const;
  // Records of a pod (any container).
  std::vector<ContainerRecord> ForPod(const std::string& pod_uid) const;

  const std::string& dir() const { return dir_; }

 private:
  Status WriteRecordLocked(const ContainerRecord& record);
  // Reads <dir>/<key> (record + the ledger's limits); no lock needed (files only).
  std::optional<ContainerRecord> ReadDir(const std::string& key) const;

  const std::string dir_;
  mutable std::mutex mu_;
  std::map<std::string, ContainerRecord> records_;  // guarded by mu_
  uint64_t generation_ = 0;  // guarded by mu_; bumped by every change made through this object
};

}  // namespace vgpu::node
