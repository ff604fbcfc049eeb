// TEST DOUBLE ONLY: shared state of the simulated GPUs (see sim_state.h and README.md).
#include "sim_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vgpusim {

using layout::StateFile;

namespace {

struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
};

// Reads the state letter (field 3) and start time (field 22) of /proc/<pid>/stat. The command
// name (field 2) may contain spaces and parentheses, so parsing starts after the last ')'.
bool ReadProcStat(int pid, ProcStat* out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  out->state = *p;
  // Fields after ')' start at field 3 (state); field 22 is 19 more spaces away.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  out->start_time = std::strtoull(p, nullptr, 10);
  return true;
}

bool ProcessAlive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  ProcStat stat;
  if (!ReadProcStat(pid, &stat)) return false;
  if (stat.state == 'Z' || stat.state == 'X' || stat.state == 'x') return false;
  return stat.start_time == start_time;
}

void InitMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

void ResetGeometry(StateFile* file, const Config& config) {
  file->device_count = static_cast<uint32_t>(config.device_count);
  for (int d = 0; d < kMaxDevices; ++d) {
    auto& dev = file->devices[d];
    dev.total_bytes = d < config.device_count ? config.memory_bytes[d] : 0;
    dev.busy_until_ns = 0;
    dev.ring_count = 0;
    dev.high_water_bytes = 0;
  }
  std::memset(file->processes, 0, sizeof file->processes);
  std::memset(file->shares, 0, sizeof file->shares);
}

// Maps the file, initialising it under flock() if it is new. The flock only serialises creation;
// afterwards the robust mutex inside the file is the lock.
StateFile* MapFile(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "VGPU_SIM_STATE='" + path + "': open: " + std::strerror(errno);
    return nullptr;
  }
  ::flock(fd, LOCK_EX);
  struct stat st {};
  ::fstat(fd, &st);
  const bool fresh = st.st_size == 0;
  if (fresh && ::ftruncate(fd, sizeof(StateFile)) != 0) {
    *error = "VGPU_SIM_STATE='" + path + "': ftruncate: " + std::strerror(errno);
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return nullptr;
  }
  if (!fresh && static_cast<uint64_t>(st.st_size) != sizeof(StateFile)) {
    *error = "VGPU_SIM_STATE='" + path + "': not a simulator state file of layout version " +
             std::to_string(layout::kVersion) + " (size differs); delete it";
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return nullptr;
  }
  void* addr = ::mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  auto* file = addr == MAP_FAILED ? nullptr : static_cast<StateFile*>(addr);
  if (file == nullptr) {
    *error = "VGPU_SIM_STATE='" + path + "': mmap: " + std::strerror(errno);
  } else if (fresh) {
    InitMutex(&file->mutex);
    file->version = layout::kVersion;
    file->file_bytes = sizeof(StateFile);
    file->next_share_id = 1;
    __atomic_store_n(&file->magic, layout::kMagic, __ATOMIC_RELEASE);
  } else if (file->magic != layout::kMagic || file->version != layout::kVersion) {
    *error = "VGPU_SIM_STATE='" + path + "': bad magic or layout version; delete it";
    ::munmap(addr, sizeof(StateFile));
    file = nullptr;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);  // the mapping keeps the file
  return file;
}

StateFile* g_private_file = nullptr;

// A fork()ed child of a private-state process has its own copy of the state; a mutex copied
// while another parent thread held it would never be released there, so it starts afresh.
void ReinitPrivateMutexInChild() {
  if (g_private_file != nullptr) InitMutex(&g_private_file->mutex);
}

StateFile* MapPrivate() {
  void* addr = ::mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) return nullptr;
  auto* file = static_cast<StateFile*>(addr);
  InitMutex(&file->mutex);
  file->magic = layout::kMagic;
  file->version = layout::kVersion;
  file->file_bytes = sizeof(StateFile);
  file->next_share_id = 1;
  g_private_file = file;
  pthread_atfork(nullptr, nullptr, &ReinitPrivateMutexInChild);
  return file;
}

}  // namespace

// RAII holder of the state mutex. A previous owner that died leaves the mutex EOWNERDEAD: every
// update below is a few stores that leave the state usable, so marking it consistent and reaping
// is the whole recovery.
class SharedState::Lock {
 public:
  explicit Lock(StateFile* file) : mutex_(&file->mutex) {
    const int rc = pthread_mutex_lock(mutex_);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(mutex_);
    } else if (rc != 0) {
      std::fprintf(stderr, "vgpu-sim: state mutex unusable (%s)\n", std::strerror(rc));
      std::abort();
    }
  }
  ~Lock() { pthread_mutex_unlock(mutex_); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

SharedState::SharedState(StateFile* file, int slot, uint64_t teardown_ns)
    : file_(file), slot_(slot), slot_pid_(static_cast<int32_t>(::getpid())), teardown_ns_(teardown_ns) {
  device_count_ = static_cast<int>(file->device_count);
}

layout::ProcessRecord& SharedState::Own() {
  const auto pid = static_cast<int32_t>(::getpid());
  if (pid == slot_pid_) return file_->processes[slot_];
  ProcStat self;
  ReadProcStat(pid, &self);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int i = 0; i < layout::kMaxProcesses; ++i) {
      auto& proc = file_->processes[i];
      if (proc.pid != 0) continue;
      std::memset(&proc, 0, sizeof proc);
      proc.pid = pid;
      proc.start_time = self.start_time;
      slot_ = i;
      slot_pid_ = pid;
      return proc;
    }
    ReapLocked();
  }
  std::fprintf(stderr, "vgpu-sim: simulator state: more than 128 live processes\n");
  std::abort();
}

SharedState* SharedState::Open(const Config& config, std::string* error) {
  StateFile* file = config.state_path.empty() ? MapPrivate() : MapFile(config.state_path, error);
  if (file == nullptr) {
    if (error->empty()) *error = "cannot map simulator state";
    return nullptr;
  }
  ProcStat self;
  if (!ReadProcStat(static_cast<int>(::getpid()), &self)) {
    *error = "cannot read /proc/self/stat";
    return nullptr;
  }
  int slot = -1;
  {
    Lock lock(file);
    bool anyone_alive = false;
    for (auto& proc : file->processes) {
      if (proc.pid == 0) continue;
      if (ProcessAlive(proc.pid, proc.start_time) && proc.pid != ::getpid()) {
        anyone_alive = true;
      } else if (config.teardown_ns == 0 || proc.pid == ::getpid()) {
        std::memset(&proc, 0, sizeof proc);
      } else if (proc.dead_since_ns == 0) {
        proc.dead_since_ns = NowNs();  // being torn down; a later reap clears it
      }
    }
    if (!anyone_alive) {
      for (auto& proc : file->processes) {
        if (proc.pid != 0 && proc.pid != ::getpid()) std::memset(&proc, 0, sizeof proc);
      }
      ResetGeometry(file, config);
    } else {
      bool same = static_cast<int>(file->device_count) == config.device_count;
      for (int d = 0; same && d < config.device_count; ++d) {
        same = file->devices[d].total_bytes == config.memory_bytes[d];
      }
      if (!same) {
        std::fprintf(stderr,
                     "vgpu-sim: VGPU_SIM_STATE '%s' is in use with another geometry (%u devices); "
                     "using the file's, not this process's VGPU_SIM_DEVICE_COUNT/VGPU_SIM_MEMORY\n",
                     config.state_path.c_str(), file->device_count);
      }
    }
    for (int i = 0; i < layout::kMaxProcesses; ++i) {
      if (file->processes[i].pid == 0) {
        slot = i;
        break;
      }
    }
    if (slot >= 0) {
      auto& proc = file->processes[slot];
      std::memset(&proc, 0, sizeof proc);
      proc.start_time = self.start_time;
      proc.pid = static_cast<int32_t>(::getpid());
    }
  }
  if (slot < 0) {
    *error = "simulator state: more than 128 live processes";
    return nullptr;
  }
  return new SharedState(file, slot, config.teardown_ns);
}

uint64_t SharedState::total_bytes(int dev) const { return file_->devices[dev].total_bytes; }

void SharedState::ReapLocked() {
  for (int i = 0; i < layout::kMaxProcesses; ++i) {
    auto& proc = file_->processes[i];
    if (proc.pid == 0 || (i == slot_ && slot_pid_ == proc.pid)) continue;
    if (!ProcessAlive(proc.pid, proc.start_time)) ExpireDeadLocked(proc);
  }
  for (auto& share : file_->shares) {
    if (share.id != 0 && !ProcessAlive(share.owner_pid, share.owner_start_time)) {
      std::memset(&share, 0, sizeof share);
    }
  }
}

void SharedState::ExpireDeadLocked(layout::ProcessRecord& proc) {
  if (teardown_ns_ > 0) {
    const uint64_t now = NowNs();
    if (proc.dead_since_ns == 0) proc.dead_since_ns = now;
    if (now - proc.dead_since_ns < teardown_ns_) return;
  }
  std::memset(&proc, 0, sizeof proc);
}

uint64_t SharedState::UsedLocked(int dev) const {
  uint64_t used = 0;
  for (const auto& proc : file_->processes) {
    if (proc.pid != 0) used += proc.used_bytes[dev];
  }
  return used;
}

bool SharedState::TryCharge(int dev, uint64_t bytes) {
  Lock lock(file_);
  const uint64_t total = file_->devices[dev].total_bytes;
  auto fits = [&] {
    const uint64_t used = UsedLocked(dev);
    return used <= total && bytes <= total - used;
  };
  if (!fits()) {
    ReapLocked();
    if (!fits()) return false;
  }
  Own().used_bytes[dev] += bytes;
  NoteHighWaterLocked(dev);
  return true;
}

void SharedState::Uncharge(int dev, uint64_t bytes) {
  Lock lock(file_);
  auto& used = Own().used_bytes[dev];
  used -= std::min(used, bytes);
}

bool SharedState::OpenContext(int dev, uint64_t overhead) {
  Lock lock(file_);
  auto& proc = Own();
  if (proc.context_count[dev] == 0) {
    const uint64_t total = file_->devices[dev].total_bytes;
    uint64_t used = UsedLocked(dev);
    if (used > total || overhead > total - used) {
      ReapLocked();
      used = UsedLocked(dev);
      if (used > total || overhead > total - used) return false;
    }
    proc.used_bytes[dev] += overhead;
    NoteHighWaterLocked(dev);
  }
  ++proc.context_count[dev];
  return true;
}

void SharedState::CloseContext(int dev, uint64_t overhead) {
  Lock lock(file_);
  auto& proc = Own();
  if (proc.context_count[dev] == 0) return;
  if (--proc.context_count[dev] == 0) proc.used_bytes[dev] -= std::min(proc.used_bytes[dev], overhead);
}

uint64_t SharedState::UsedBytes(int dev) {
  Lock lock(file_);
  ReapLocked();
  return UsedLocked(dev);
}

void SharedState::NoteHighWaterLocked(int dev) {
  uint64_t& high = file_->devices[dev].high_water_bytes;
  high = std::max(high, UsedLocked(dev));
}

uint64_t SharedState::HighWaterBytes(int dev) {
  Lock lock(file_);
  return file_->devices[dev].high_water_bytes;
}

uint64_t SharedState::OwnUsedBytes(int dev) {
  Lock lock(file_);
  return Own().used_bytes[dev];
}

std::vector<ProcessUsage> SharedState::Processes(int dev) {
  Lock lock(file_);
  ReapLocked();
  std::vector<ProcessUsage> out;
  for (const auto& proc : file_->processes) {
    if (proc.pid != 0 && (proc.context_count[dev] > 0 || proc.used_bytes[dev] > 0)) {
      out.push_back({proc.pid, proc.used_bytes[dev]});
    }
  }
  return out;
}

uint64_t SharedState::Schedule(int dev, uint64_t earliest_ns, uint64_t duration_ns) {
  Lock lock(file_);
  auto& device = file_->devices[dev];
  const uint64_t start = std::max(earliest_ns, device.busy_until_ns);
  const uint64_t end = start + duration_ns;
  device.busy_until_ns = end;
  if (duration_ns == 0) return end;
  auto& newest = device.ring[(device.ring_count + layout::kBusyRingSize - 1) % layout::kBusyRingSize];
  if (device.ring_count > 0 && start <= newest.end_ns) {
    newest.end_ns = std::max(newest.end_ns, end);  // back-to-back work: one interval
  } else {
    device.ring[device.ring_count % layout::kBusyRingSize] = {start, end};
    ++device.ring_count;
  }
  return end;
}

double SharedState::BusyFraction(int dev, uint64_t now_ns, uint64_t window_ns) {
  Lock lock(file_);
  const auto& device = file_->devices[dev];
  const uint64_t low = now_ns > window_ns ? now_ns - window_ns : 0;
  const uint64_t kept = std::min<uint64_t>(device.ring_count, layout::kBusyRingSize);
  uint64_t busy = 0;
  uint64_t covered_from = low;
  for (uint64_t i = 0; i < kept; ++i) {
    const auto& interval = device.ring[(device.ring_count - 1 - i) % layout::kBusyRingSize];
    if (interval.end_ns <= low) break;
    const uint64_t start = std::max(interval.start_ns, low);
    const uint64_t end = std::min(interval.end_ns, now_ns);
    if (end > start) busy += end - start;
    // When the ring is too short for the window, measure over the part it covers.
    if (i + 1 == kept && device.ring_count > kept) covered_from = std::max(low, interval.start_ns);
  }
  const uint64_t window = now_ns > covered_from ? now_ns - covered_from : 0;
  if (window == 0) return 0.0;
  return std::min(1.0, static_cast<double>(busy) / static_cast<double>(window));
}

uint64_t SharedState::CreateShare(int dev, uint64_t size) {
  Lock lock(file_);
  for (auto& share : file_->shares) {
    if (share.id != 0) continue;
    share.id = file_->next_share_id++;
    share.size = size;
    share.device = static_cast<uint32_t>(dev);
    share.owner_pid = Own().pid;
    share.owner_start_time = Own().start_time;
    share.refs = 1;
    return share.id;
  }
  return 0;
}

bool SharedState::AddShareRef(uint64_t id, int* dev, uint64_t* size) {
  Lock lock(file_);
  for (auto& share : file_->shares) {
    if (share.id != id || id == 0) continue;
    ++share.refs;
    *dev = static_cast<int>(share.device);
    *size = share.size;
    return true;
  }
  return false;
}

void SharedState::DropShareRef(uint64_t id) {
  Lock lock(file_);
  for (auto& share : file_->shares) {
    if (share.id != id || id == 0) continue;
    if (--share.refs == 0) {
      for (auto& proc : file_->processes) {
        if (proc.pid == share.owner_pid && proc.start_time == share.owner_start_time) {
          proc.used_bytes[share.device] -= std::min(proc.used_bytes[share.device], share.size);
        }
      }
      std::memset(&share, 0, sizeof share);
    }
    return;
  }
}

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntil(uint64_t deadline_ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1000000000ull);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1000000000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace vgpusim
