#include "node/registrar.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "protocol/wire_transport.h"

namespace vgpu::node {

void Registry::Add(const Registration& r) {
  std::lock_guard<std::mutex> lock(mu_);
  by_pid_[r.host_pid] = r;
}

bool Registry::Has(int32_t host_pid, uint64_t start_time) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_pid_.find(host_pid);
  return it != by_pid_.end() && (start_time == 0 || it->second.start_time == 0 || it->second.start_time == start_time);
}

std::vector<Registration> Registry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Registration> out;
  out.reserve(by_pid_.size());
  for (const auto& [pid, r] : by_pid_) out.push_back(r);
  return out;
}

size_t Registry::CountFor(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [pid, r] : by_pid_) n += r.key == key;
  return n;
}

size_t Registry::Prune(const ProcFs& procfs) {
  const std::vector<Registration> all = All();
  size_t dropped = 0;
  for (const Registration& r : all) {
    if (procfs.Alive(r.host_pid, r.start_time)) continue;
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_pid_.find(r.host_pid);
    if (it != by_pid_.end() && it->second.start_time == r.start_time) {
      by_pid_.erase(it);
      ++dropped;
    }
  }
  return dropped;
}

size_t Registry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_pid_.size();
}

wire::Limits WireLimits(const ledger::LimitSet& limits) {
  wire::Limits w;
  w.default_memory_limit = limits.default_memory_limit;
  w.default_sm_limit = static_cast<uint32_t>(limits.default_sm_limit);
  w.default_sm_soft_limit = static_cast<uint32_t>(limits.default_sm_soft_limit);
  w.task_priority = static_cast<uint32_t>(limits.task_priority);
  for (const ledger::DeviceLimit& d : limits.devices) {
    wire::DeviceLimits wd;
    wd.ordinal = d.ordinal;
    wd.uuid = d.uuid;
    wd.memory_limit = d.memory_limit;
    wd.sm_limit = static_cast<uint32_t>(d.sm_limit);
    wd.sm_soft_limit = static_cast<uint32_t>(d.sm_soft_limit);
    w.devices.push_back(wd);
  }
  return w;
}

Registrar::Registrar(ContainerStore& store, Registry& registry, const ProcFs& procfs, std::string container_ledger_path,
                     Logger& log)
    : store_(store),
      registry_(registry),
      procfs_(procfs),
      container_ledger_path_(std::move(container_ledger_path)),
      log_(log),
      own_mount_ns_(procfs.Namespace(0, "mnt")) {}

wire::RegisterReply Registrar::Refuse(const PeerCred& peer, const wire::RegisterRequest& request, std::string why) {
  log_.Log(Level::kWarn, "registration", "refused",
           {{"host_pid", static_cast<int64_t>(peer.pid)}, {"uid", static_cast<int64_t>(peer.uid)},
            {"pod_uid", request.pod_uid}, {"container", request.container_name}, {"reason", why}});
  wire::RegisterReply reply;
  reply.status = wire::Status::kRefused;
  reply.message = std::move(why);
  return reply;
}

std::optional<ContainerRecord> Registrar::Resolve(const wire::RegisterRequest& request, std::string* why) {
  if (request.pod_uid.empty()) {
    *why = "no pod uid in the request (set VGPU_POD_UID, or run in a Kubernetes pod cgroup)";
    return std::nullopt;
  }
  if (!request.container_name.empty()) {
    if (const std::string bad = ValidateIdentity(request.pod_uid, request.container_name); !bad.empty()) {
      *why = bad;
      return std::nullopt;
    }
    const std::string key = ContainerKey(request.pod_uid, request.container_name);
    std::optional<ContainerRecord> record = store_.Get(key);
    if (!record && store_.Load(key)) record = store_.Get(key);
    if (!record) *why = "no limited container " + key + " on this node";
    return record;
  }
  std::vector<ContainerRecord> of_pod = store_.ForPod(request.pod_uid);
  const int64_t now = wire::MonotonicNs();
  int64_t last = last_rescan_ns_.load();
  if (of_pod.empty() && now - last >= 1'000'000'000 && last_rescan_ns_.compare_exchange_strong(last, now)) {
    store_.Rescan();
    of_pod = store_.ForPod(request.pod_uid);
  }
  if (of_pod.size() == 1) return of_pod[0];
  *why = of_pod.empty() ? "no limited container of pod " + request.pod_uid + " on this node"
                        : "pod " + request.pod_uid + " has " + std::to_string(of_pod.size()) +
                              " limited containers; set VGPU_CONTAINER_NAME to say which";
  return std::nullopt;
}

std::string Registrar::GrantLedger(const ContainerRecord& record, const PeerCred& peer) {
  if (peer.uid == 0) return "";  // root writes any ledger
  const std::string path = record.LedgerPath();
  std::lock_guard<std::mutex> lock(grant_mu_);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "cannot open the ledger " + path + ": " + strerror(errno);
  struct stat st;
  std::string problem;
  if (fstat(fd, &st) != 0) {
    problem = "cannot stat the ledger " + path + ": " + strerror(errno);
  } else if (st.st_uid == peer.uid) {
    // already the caller's
  } else if (st.st_uid != geteuid()) {
    problem = "the ledger " + path + " of container " + record.key + " belongs to uid " + std::to_string(st.st_uid) +
              " (its first registered process); a process of uid " + std::to_string(peer.uid) +
              " could not charge it: run the container's GPU processes as one uid (or as root)";
  } else if (!S_ISREG(st.st_mode)) {
    problem = "the ledger " + path + " is not a regular file";
  } else if (fchown(fd, peer.uid, peer.gid) != 0) {
    problem = "cannot give the ledger " + path + " to uid " + std::to_string(peer.uid) + ": " + strerror(errno);
  } else {
    log_.Log(Level::kInfo, "registration", "ledger given to the container's uid",
             {{"container", record.key}, {"uid", static_cast<int64_t>(peer.uid)}, {"gid", static_cast<int64_t>(peer.gid)}});
  }
  close(fd);
  return problem;
}

wire::RegisterReply Registrar::Handle(const PeerCred& peer, const wire::RegisterRequest& request) {
  const ProcessFacts facts = procfs_.Facts(peer.pid, false);
  if (!facts.exists) return Refuse(peer, request, "caller pid " + std::to_string(peer.pid) + " not found under " + procfs_.proc_root());
  std::string why;
  std::optional<ContainerRecord> record = Resolve(request, &why);
  if (!record) return Refuse(peer, request, why);
  if (!record->error.empty()) return Refuse(peer, request, "container " + record->key + " is unusable: " + record->error);
  if (record->released()) return Refuse(peer, request, "container " + record->key + " was released (its pod is gone)");

  // The cgroup check: the identity must match where the process really lives.
  if (facts.cgroup.empty()) return Refuse(peer, request, "cannot read the cgroup of pid " + std::to_string(peer.pid));
  if (!record->cgroup.empty()) {
    if (!CgroupContains(record->cgroup, facts.cgroup)) {
      return Refuse(peer, request, "pid " + std::to_string(peer.pid) + " is in cgroup " + facts.cgroup + ", outside " +
                                       record->key + "'s cgroup " + record->cgroup);
    }
  } else {
    if (!CgroupNamesPod(facts.cgroup, record->pod_uid)) {
      return Refuse(peer, request, "pid " + std::to_string(peer.pid) + " is in cgroup " + facts.cgroup +
                                       ", which is not pod " + record->pod_uid + "'s");
    }
    std::lock_guard<std::mutex> lock(pin_mu_);
    const std::optional<ContainerRecord> current = store_.Get(record->key);
    const std::string pinned = current ? current->pinned_cgroup : record->pinned_cgroup;
    if (!pinned.empty() && !CgroupContains(pinned, facts.cgroup) && procfs_.CgroupExists(pinned)) {
      return Refuse(peer, request, "container " + record->key + " runs in cgroup " + pinned + "; pid " +
                                       std::to_string(peer.pid) + " is in " + facts.cgroup);
    }
    if (pinned.empty() || !CgroupContains(pinned, facts.cgroup)) {
      if (Status s = store_.Pin(record->key, facts.cgroup); !s.ok) {
        log_.Log(Level::kWarn, "registration", "cannot record the container's cgroup",
                 {{"container", record->key}, {"error", s.message}});
      }
    }
  }

  if (const std::string problem = GrantLedger(*record, peer); !problem.empty()) return Refuse(peer, request, problem);

  Registration reg;
  reg.host_pid = peer.pid;
  reg.start_time = facts.start_time;
  reg.ns_pid = static_cast<int32_t>(request.pid);
  reg.key = record->key;
  reg.registered_unix = static_cast<uint64_t>(time(nullptr));
  registry_.Add(reg);

  wire::RegisterReply reply;
  reply.status = wire::Status::kOk;
  reply.host_pid = static_cast<uint32_t>(peer.pid);
  const std::string caller_ns = procfs_.Namespace(peer.pid, "mnt");
  const bool same_mounts = caller_ns == own_mount_ns_;
  reply.ledger_path = same_mounts ? record->LedgerPath() : container_ledger_path_;
  reply.container_key = record->key;
  reply.limits = WireLimits(record->limits);
  log_.Log(Level::kInfo, "registration", "registered",
           {{"host_pid", static_cast<int64_t>(peer.pid)}, {"pid", static_cast<int64_t>(request.pid)},
            {"container", record->key}, {"cgroup", facts.cgroup}, {"ledger", reply.ledger_path}});
  return reply;
}

}  // namespace vgpu::node
