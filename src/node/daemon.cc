#include "node/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "ledger/board.h"
#include "protocol/wire_transport.h"

#ifndef VGPU_VERSION
#define VGPU_VERSION "0"
#endif

namespace vgpu::node {
namespace {

int64_t MonotonicMs() { return wire::MonotonicNs() / 1'000'000; }
uint64_t NowUnix() { return static_cast<uint64_t>(time(nullptr)); }

std::string ErrorFrame(wire::Status status, const std::string& message) {
  wire::ErrorReply e;
  e.status = status;
  e.message = message;
  return wire::EncodeFrame(wire::MessageType::kErrorReply, wire::EncodeErrorReply(e));
}

// The cgroup of the pod that contains `path` (the longest prefix whose last component names
// the pod); "" when none.
std::string PodAncestor(const std::string& path, const std::string& pod_uid) {
  std::string prefix = path;
  while (!prefix.empty() && prefix != "/") {
    const size_t slash = prefix.rfind('/');
    const std::string last = prefix.substr(slash + 1);
    if (CgroupNamesPod("/" + last, pod_uid)) return prefix;
    prefix.resize(slash == 0 ? 1 : slash);
  }
  return "";
}

// A Kubernetes pod uid: a UUID, or 32 hex digits (static pods). Anything else names no pod cgroup.
bool LooksLikePodUid(const std::string& uid) {
  size_t hex = 0;
  for (char c : uid) {
    if (std::isxdigit(static_cast<unsigned char>(c))) {
      ++hex;
    } else if (c != '-') {
      return false;
    }
  }
  return hex >= 32;
}

}  // namespace

Daemon::Daemon(NodeConfig config, Logger& log, std::unique_ptr<GpuSource> gpu_source)
    : config_(std::move(config)),
      log_(log),
      procfs_(config_.proc_root, config_.cgroup_root),
      store_(config_.ContainersDir()),
      registrar_(store_, registry_, procfs_, config_.container_ledger_path, log),
      gpus_(std::move(gpu_source)),
      health_(config_.health_ignored_xids, config_.health_recovery_ms),
      detector_(config_.bypass_grace_ms) {}

Daemon::~Daemon() { Stop(); }

Status Daemon::Start() {
  if (mkdir(config_.state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Error("state_dir " + config_.state_dir + ": cannot create: " + strerror(errno));
  }
  if (Status s = CreateBoard(); !s.ok) return s;
  if (Status s = store_.Init(); !s.ok) return s;
  const size_t containers = store_.Rescan();
  RebuildRegistry();
  for (const ContainerRecord& r : store_.List()) {
    if (!r.error.empty()) log_.Log(Level::kError, "containers", "container directory unusable", {{"container", r.key}, {"error", r.error}});
  }
  log_.Log(Level::kInfo, "containers", "state rebuilt from disk",
           {{"dir", config_.ContainersDir()}, {"containers", static_cast<uint64_t>(containers)},
            {"registered_processes", static_cast<uint64_t>(registry_.size())}});

  if (!gpus_ && config_.nvml_library != "off") {
    std::string error;
    gpus_ = OpenNvmlSource(config_.nvml_library, &error);
    if (!gpus_) log_.Log(Level::kWarn, "gpu", "NVML unavailable: running without GPU data, bypass detection and health", {{"error", error}});
  }
  if (gpus_) {
    const std::vector<GpuSample> sample = gpus_->Sample();
    std::vector<std::pair<uint32_t, std::string>> devices;
    for (const GpuSample& g : sample) devices.emplace_back(g.index, g.uuid);
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      health_.SetDevices(devices);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      inventory_ = sample;
      for (GpuSample& g : inventory_) g.processes.clear();
    }
    log_.Log(Level::kInfo, "gpu", "NVML loaded", {{"nvml", gpus_->Describe()}});
  }

  SocketServerOptions options;
  options.path = config_.SocketPath();
  options.mode = config_.socket_mode;
  options.threads = config_.server_threads;
  options.request_timeout_ms = config_.request_timeout_ms;
  options.max_connections = config_.max_connections;
  server_ = std::make_unique<SocketServer>(
      options, [this](const PeerCred& peer, const wire::FrameHeader& h, std::string_view payload) { return HandleFrame(peer, h, payload); },
      [this](const PeerCred& peer, const char* reason, const std::string& detail) {
        CountReject(reason);
        if (strcmp(reason, "peer_closed") != 0) {
          log_.Log(Level::kWarn, "registration", "connection rejected",
                   {{"reason", reason}, {"host_pid", static_cast<int64_t>(peer.pid)}, {"detail", detail}});
        }
      });
  if (Status s = server_->Start(); !s.ok) return s;

  if (config_.metrics_listen != "off") {
    http_.Route("/metrics", [this] {
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", RenderMetricsNow()};
    });
    http_.Route("/healthz", [] { return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}; });
    std::string listen = config_.metrics_listen;
    if (!listen.empty() && listen[0] == ':') listen = "0.0.0.0" + listen;
    if (Status s = http_.Start(listen); !s.ok) {
      server_->Stop();
      return s;
    }
  }
  started_ = true;
  housekeeping_ = std::thread([this] { HousekeepingLoop(); });
  health_thread_ = std::thread([this] { HealthLoop(); });
  WriteReadyFile();
  log_.Log(Level::kInfo, "daemon", "serving",
           {{"socket", config_.SocketPath()}, {"metrics", http_.bound_address().empty() ? "off" : http_.bound_address()},
            {"state_dir", config_.state_dir}, {"version", VGPU_VERSION}});
  return Status::Ok();
}

Status Daemon::CreateBoard() {
  // The device plugin mounts <state_dir>/board into every container (VGPU_BOARD): the file must
  // exist before the first container starts, or its mount fails. Board::Open creates it 0666
  // (every container's processes write heartbeats; it carries scheduling hints only) and checks
  // an existing one: a board of another format is refused here, at start, rather than by every
  // process that later maps it.
  ledger::LedgerStatus status;
  const std::unique_ptr<ledger::Board> board = ledger::Board::Open(config_.BoardPath(), &status);
  if (!board) {
    return Status::Error("compute board " + config_.BoardPath() + ": " + status.message +
                         " (remove the file when no container uses it; the daemon creates a new one)");
  }
  log_.Log(Level::kInfo, "daemon", "compute board ready", {{"path", config_.BoardPath()}});
  return Status::Ok();
}

void Daemon::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
  if (health_thread_.joinable()) health_thread_.join();
  if (server_) server_->Stop();
  http_.Stop();
  if (started_ && !config_.ready_file.empty()) unlink(config_.ready_file.c_str());
  if (started_) log_.Log(Level::kInfo, "daemon", "stopped");
}

void Daemon::WriteReadyFile() {
  if (config_.ready_file.empty()) return;
  const std::string text = "socket=" + config_.SocketPath() + "\nmetrics=" + http_.bound_address() +
                           "\npid=" + std::to_string(getpid()) + "\n";
  const std::string tmp = config_.ready_file + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    log_.Log(Level::kError, "daemon", "cannot write the ready file", {{"path", config_.ready_file}, {"error", strerror(errno)}});
    return;
  }
  [[maybe_unused]] ssize_t n = write(fd, text.data(), text.size());
  close(fd);
  rename(tmp.c_str(), config_.ready_file.c_str());
}

void Daemon::RebuildRegistry() {
  for (const ContainerRecord& r : store_.List()) {
    if (!r.error.empty()) continue;
    const LedgerView view = ReadLedger(r);
    for (const ledger::ProcessUsage& p : view.snapshot.processes) {
      if (p.host_pid <= 0 || !procfs_.Alive(p.host_pid, p.start_time)) continue;
      Registration reg;
      reg.host_pid = p.host_pid;
      reg.start_time = p.start_time;
      reg.ns_pid = p.pid;
      reg.key = r.key;
      reg.registered_unix = NowUnix();
      registry_.Add(reg);
    }
  }
}

// --- requests -----------------------------------------------------------------------------------

void Daemon::CountReject(const char* reason) {
  std::lock_guard<std::mutex> lock(rejects_mu_);
  ++rejects_[reason];
}

std::string Daemon::HandleFrame(const PeerCred& peer, const wire::FrameHeader& header, std::string_view payload) {
  if (header.version != wire::kWireVersion) {
    CountReject("unsupported_version");
    return ErrorFrame(wire::Status::kUnsupportedVersion,
                      "protocol version " + std::to_string(header.version) + " is not supported; this daemon speaks " +
                          std::to_string(wire::kWireVersion));
  }
  switch (header.type) {
    case wire::MessageType::kRegisterRequest:
      return HandleRegister(peer, payload);
    case wire::MessageType::kQueryRequest:
      return HandleQuery(peer);
    default:
      CountReject("unsupported_type");
      return ErrorFrame(wire::Status::kUnsupportedType,
                        "message type " + std::to_string(static_cast<int>(header.type)) + " is not served");
  }
}

std::string Daemon::HandleRegister(const PeerCred& peer, std::string_view payload) {
  const int64_t start = wire::MonotonicNs();
  wire::RegisterRequest request;
  if (const std::string bad = wire::DecodeRegisterRequest(payload, &request); !bad.empty()) {
    CountReject("malformed");
    log_.Log(Level::kWarn, "registration", "malformed request", {{"host_pid", static_cast<int64_t>(peer.pid)}, {"error", bad}});
    return ErrorFrame(wire::Status::kMalformed, bad);
  }
  const wire::RegisterReply reply = registrar_.Handle(peer, request);
  (reply.status == wire::Status::kOk ? registrations_ok_ : registrations_refused_).fetch_add(1);
  std::string frame = wire::EncodeFrame(wire::MessageType::kRegisterReply, wire::EncodeRegisterReply(reply));
  latency_.Observe(wire::MonotonicNs() - start);
  return frame;
}

std::string Daemon::HandleQuery(const PeerCred& peer) {
  // Node-wide data is for host processes only: the caller must share the daemon's pid namespace.
  const std::string own = procfs_.Namespace(0, "pid");
  const std::string theirs = procfs_.Namespace(peer.pid, "pid");
  if (own.empty() || theirs != own) {
    CountReject("not_permitted");
    return ErrorFrame(wire::Status::kRefused, "node-wide queries are answered only to processes in the daemon's pid namespace");
  }
  return wire::EncodeFrame(wire::MessageType::kQueryReply, wire::EncodeQueryReply(Query()));
}

wire::QueryReply Daemon::Query() {
  wire::QueryReply reply;
  reply.node = config_.node_name;
  for (const ContainerRecord& r : store_.List()) {
    wire::ContainerInfo c;
    c.key = r.key;
    c.pod_uid = r.pod_uid;
    c.container_name = r.container_name;
    c.ns = r.ns;
    c.pod_name = r.pod_name;
    c.ledger_path = r.LedgerPath();
    c.cgroup = r.EffectiveCgroup();
    c.state = !r.error.empty() ? "error: " + r.error : r.released() ? "released" : "active";
    c.registered = static_cast<uint32_t>(registry_.CountFor(r.key));
    reply.containers.push_back(c);
  }
  std::vector<GpuSample> gpus = gpus_ ? gpus_->Sample() : std::vector<GpuSample>{};
  const std::vector<GpuHealth> health = Gpus();
  for (const GpuSample& g : gpus) {
    wire::GpuInfo info;
    info.index = g.index;
    info.uuid = g.uuid;
    info.name = g.name;
    info.memory_total = g.memory_total;
    info.memory_used = g.memory_used;
    info.utilization = g.utilization;
    for (const GpuHealth& h : health) {
      if (h.index == g.index) {
        info.healthy = h.healthy ? 1 : 0;
        info.health_reason = h.reason;
      }
    }
    reply.gpus.push_back(info);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const BypassFinding& f : findings_) {
    wire::BypassInfo b;
    b.host_pid = static_cast<uint32_t>(f.host_pid);
    b.container_key = f.container_key;
    for (const auto& [uuid, bytes] : f.memory) {
      b.gpu_uuid += (b.gpu_uuid.empty() ? "" : ",") + uuid;
      b.memory += bytes;
    }
    b.first_seen_unix = f.first_seen_unix;
    b.comm = f.comm;
    reply.bypass.push_back(b);
  }
  return reply;
}

// --- housekeeping ---------------------------------------------------------------------------------

void Daemon::HousekeepingLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      if (stop_cv_.wait_for(lock, std::chrono::milliseconds(config_.scan_interval_ms), [this] { return stopping_; })) return;
    }
    Scan();
  }
}

void Daemon::ScanNow() { Scan(); }

Daemon::LedgerView Daemon::ReadLedger(const ContainerRecord& record) const {
  LedgerView view;
  ledger::LedgerStatus status;
  const std::unique_ptr<ledger::Ledger> ledger = ledger::Ledger::OpenReadOnly(record.LedgerPath(), &status);
  if (ledger == nullptr) {
    view.error = status.message;
    return view;
  }
  view.snapshot = ledger->Read();
  if (!ledger->Health().ok) view.error = ledger->Health().message;
  return view;
}

bool Daemon::ContainerGone(const ContainerRecord& r, uint64_t now_unix) const {
  if (r.released()) return true;
  if (!r.cgroup.empty()) return !procfs_.CgroupExists(r.cgroup);
  if (!r.pinned_cgroup.empty()) {
    if (procfs_.CgroupExists(r.pinned_cgroup)) return false;
    const std::string pod = PodAncestor(r.pinned_cgroup, r.pod_uid);
    if (!pod.empty() && procfs_.CgroupExists(pod)) return false;  // the container restarted
    return procfs_.FindPodCgroup(r.pod_uid).empty();
  }
  // Never registered: give the pod time to start, then look for its cgroup. Only a Kubernetes pod
  // uid names a cgroup; a record with any other uid (a standalone grant, "standalone-<id>") is
  // gone when its mode module releases it.
  if (!LooksLikePodUid(r.pod_uid)) return false;
  if (now_unix < r.created_unix + static_cast<uint64_t>(config_.orphan_grace_ms / 1000)) return false;
  return procfs_.FindPodCgroup(r.pod_uid).empty();
}

void Daemon::Scan() {
  std::lock_guard<std::mutex> scan_lock(scan_mu_);
  const int64_t start = wire::MonotonicNs();
  store_.Rescan();
  registry_.Prune(procfs_);
  const std::vector<ContainerRecord> records = store_.List();
  std::map<std::string, LedgerView> views;
  for (const ContainerRecord& r : records) {
    if (r.error.empty()) views.emplace(r.key, ReadLedger(r));
  }

  // Bypass detection.
  std::vector<BypassFinding> findings;
  if (gpus_) {
    BypassInputs in;
    in.gpus = gpus_->Sample();
    {
      std::lock_guard<std::mutex> lock(mu_);
      inventory_ = in.gpus;
      for (GpuSample& g : inventory_) g.processes.clear();
    }
    in.records = records;
    for (const auto& [key, view] : views) in.ledger_processes[key] = view.snapshot.processes;
    in.registered = [this](int32_t pid, uint64_t start_time) { return registry_.Has(pid, start_time); };
    in.facts = [this](int32_t pid) { return procfs_.Facts(pid, true); };
    findings = detector_.Scan(in, MonotonicMs(), NowUnix());
    bypass_detections_.store(detector_.detections_total());
    for (const BypassFinding& f : findings) {
      if (f.reported) continue;
      uint64_t memory = 0;
      std::string uuids;
      for (const auto& [uuid, bytes] : f.memory) {
        memory += bytes;
        uuids += (uuids.empty() ? "" : ",") + uuid;
      }
      log_.Log(Level::kWarn, "bypass", "GPU process in a limited container is not accounted by vgpu",
               {{"host_pid", static_cast<int64_t>(f.host_pid)}, {"comm", f.comm}, {"container", f.container_key},
                {"cgroup", f.cgroup}, {"gpus", uuids}, {"memory_bytes", memory},
                {"action", config_.bypass_action == BypassAction::kKill ? "kill" : "report"}});
      detector_.MarkReported(f.host_pid, f.start_time);
      if (config_.bypass_action == BypassAction::kKill) {
        // Re-check identity right before the signal: never kill a reused pid.
        if (procfs_.Alive(f.host_pid, f.start_time) && kill(f.host_pid, SIGKILL) == 0) {
          bypass_kills_.fetch_add(1);
          log_.Log(Level::kWarn, "bypass", "killed", {{"host_pid", static_cast<int64_t>(f.host_pid)}, {"container", f.container_key}});
        } else {
          log_.Log(Level::kError, "bypass", "could not kill", {{"host_pid", static_cast<int64_t>(f.host_pid)}, {"error", strerror(errno)}});
        }
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    findings_ = findings;
  }

  // Removal of containers that are gone and whose processes are all dead.
  const uint64_t now_unix = NowUnix();
  for (const ContainerRecord& r : records) {
    if (!r.error.empty() || !ContainerGone(r, now_unix)) continue;
    bool live = registry_.CountFor(r.key) > 0;
    const auto it = views.find(r.key);
    if (it != views.end()) {
      for (const ledger::ProcessUsage& p : it->second.snapshot.processes) {
        if (procfs_.Alive(p.host_pid, p.start_time)) live = true;
      }
    }
    if (live) continue;
    if (Status s = store_.Remove(r.key); s.ok) {
      containers_removed_.fetch_add(1);
      log_.Log(Level::kInfo, "containers", "removed container directory (container gone, no live process)",
               {{"container", r.key}, {"released", r.released()}});
    } else {
      log_.Log(Level::kError, "containers", "cannot remove container directory", {{"container", r.key}, {"error", s.message}});
    }
  }
  scans_.fetch_add(1);
  last_scan_ns_.store(wire::MonotonicNs() - start);
}

// --- health ---------------------------------------------------------------------------------------

void Daemon::HealthLoop() {
  // How long one wait for NVML's events lasts: a stop waits for the one in progress (with 500 ms
  // vgpu-node took up to ~0.45 s more to exit), and waking ten times a second costs nothing.
  constexpr int kEventWaitMs = 100;
  int64_t last_tick = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (stopping_) return;
    }
    GpuEvent event;
    if (gpus_ && gpus_->WaitEvent(kEventWaitMs, &event)) {
      bool changed = false;
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(health_mu_);
        changed = health_.OnEvent(event, MonotonicMs());
      }
      log_.Log(changed ? Level::kError : Level::kInfo, "health", "GPU event",
               {{"device_index", static_cast<uint32_t>(event.index)},
                {"kind", event.kind == GpuEvent::Kind::kXid            ? "xid"
                         : event.kind == GpuEvent::Kind::kEccDoubleBit ? "ecc_double_bit"
                         : event.kind == GpuEvent::Kind::kEccSingleBit ? "ecc_single_bit"
                                                                       : "lost"},
                {"data", event.data}, {"now_unhealthy", changed}});
      if (changed) Notify({event.index});
    } else if (!gpus_) {
      std::unique_lock<std::mutex> lock(stop_mu_);
      stop_cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; });
    }
    const int64_t now = MonotonicMs();
    if (gpus_ && now - last_tick >= 1000) {
      last_tick = now;
      std::vector<uint32_t> recovered;
      {
        std::lock_guard<std::mutex> lock(health_mu_);
        recovered = health_.Tick(now, [this](uint32_t index) { return gpus_->Probe(index); });
      }
      for (uint32_t index : recovered) log_.Log(Level::kInfo, "health", "GPU recovered", {{"device_index", index}});
      if (!recovered.empty()) Notify(recovered);
    }
  }
}

void Daemon::Notify(const std::vector<uint32_t>& changed) {
  std::vector<std::function<void(const GpuHealth&)>> callbacks;
  std::vector<GpuHealth> states;
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    for (const auto& [token, cb] : subscribers_) callbacks.push_back(cb);
    for (const GpuHealth& h : health_.Snapshot()) {
      if (std::find(changed.begin(), changed.end(), h.index) != changed.end()) states.push_back(h);
    }
  }
  for (const GpuHealth& h : states) {
    for (const auto& cb : callbacks) cb(h);
  }
}

// --- interfaces -------------------------------------------------------------------------------------

Status Daemon::Ensure(const ContainerSpec& spec, ContainerRecord* out) {
  Status s = store_.Ensure(spec, out);
  log_.Log(s.ok ? Level::kInfo : Level::kError, "containers", s.ok ? "container ensured" : "container not created",
           {{"pod_uid", spec.pod_uid}, {"container", spec.container_name}, {"error", s.message}});
  return s;
}

Status Daemon::Release(const std::string& key) {
  Status s = store_.Release(key);
  log_.Log(s.ok ? Level::kInfo : Level::kError, "containers", "container released", {{"container", key}, {"error", s.message}});
  return s;
}

std::vector<ContainerRecord> Daemon::List() const { return store_.List(); }

std::vector<GpuSample> Daemon::Inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inventory_;
}

std::vector<GpuHealth> Daemon::Gpus() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  return health_.Snapshot();
}

int Daemon::Subscribe(std::function<void(const GpuHealth&)> on_change) {
  std::lock_guard<std::mutex> lock(health_mu_);
  const int token = next_token_++;
  subscribers_[token] = std::move(on_change);
  return token;
}

void Daemon::Unsubscribe(int token) {
  std::lock_guard<std::mutex> lock(health_mu_);
  subscribers_.erase(token);
}

// --- metrics ---------------------------------------------------------------------------------------

std::string Daemon::RenderMetricsNow() {
  MetricsSnapshot s;
  s.node = config_.node_name;
  s.version = VGPU_VERSION;
  s.nvml_up = gpus_ != nullptr;
  if (gpus_) s.gpus = gpus_->Sample();
  s.health = Gpus();
  std::map<int32_t, std::map<std::string, uint64_t>> nvml_by_pid;
  for (const GpuSample& g : s.gpus) {
    for (const GpuProcessSample& p : g.processes) nvml_by_pid[static_cast<int32_t>(p.pid)][g.uuid] += p.used;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.bypass = findings_;
  }
  for (const ContainerRecord& r : store_.List()) {
    ContainerMetrics c;
    c.record = r;
    if (!r.error.empty()) {
      c.ledger_error = r.error;
    } else {
      LedgerView view = ReadLedger(r);
      c.ledger_error = view.error;
      c.snapshot = std::move(view.snapshot);
      for (const ledger::ProcessUsage& p : c.snapshot.processes) {
        if (!procfs_.Alive(p.host_pid, p.start_time)) continue;
        ++c.live_processes;
        const auto it = nvml_by_pid.find(p.host_pid);
        if (it == nvml_by_pid.end()) continue;
        for (const auto& [uuid, bytes] : it->second) c.nvml_memory[uuid] += bytes;
      }
    }
    c.registered_processes = static_cast<uint32_t>(registry_.CountFor(r.key));
    for (const BypassFinding& f : s.bypass) c.bypass_processes += f.container_key == r.key;
    s.containers.push_back(std::move(c));
  }
  s.counters.registrations_ok = registrations_ok_.load();
  s.counters.registrations_refused = registrations_refused_.load();
  {
    std::lock_guard<std::mutex> lock(rejects_mu_);
    s.counters.rejects = rejects_;
  }
  s.counters.bypass_detections = bypass_detections_.load();
  s.counters.bypass_kills = bypass_kills_.load();
  s.counters.containers_removed = containers_removed_.load();
  s.counters.scans = scans_.load();
  s.counters.last_scan_seconds = static_cast<double>(last_scan_ns_.load()) / 1e9;
  s.latency = latency_.Read();
  return RenderMetrics(s);
}

}  // namespace vgpu::node
