// The Ledger class: the lock protocol around the file layer and the state layer.
#include "ledger/ledger.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>

#include "ledger/ledger_internal.h"

namespace vgpu::ledger {
namespace {

using internal::Admission;
using internal::File;

constexpr auto kRelaxed = std::memory_order_relaxed;

uint64_t CoarseNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // vDSO, never a syscall: fine on the hot path
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

struct AlignedFileDeleter {
  void operator()(File* file) const { ::operator delete(file, std::align_val_t{alignof(File)}); }
};
using FileCopy = std::unique_ptr<File, AlignedFileDeleter>;

FileCopy NewFileCopy() {
  return FileCopy(static_cast<File*>(::operator new(sizeof(File), std::align_val_t{alignof(File)})));
}

// Reads the whole file into a private copy and checks it (no lock: values may be mid-update,
// so only shape and ranges are checked, not the redundant totals).
FileCopy ReadCopyOnce(int fd, const std::string& path, LedgerStatus* status) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *status = LedgerStatus::Error("ledger " + path + ": cannot stat: " + strerror(errno));
    return nullptr;
  }
  FileCopy copy = NewFileCopy();
  memset(static_cast<void*>(copy.get()), 0, sizeof(File));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t want = size < sizeof(File) ? size : sizeof(File);
  if (!internal::ReadWholeFile(fd, copy.get(), want)) {
    *status = LedgerStatus::Error("ledger " + path + ": cannot read (changed size while reading?)");
    return nullptr;
  }
  *status = internal::CheckShape(path, copy.get(), want, size);
  if (!status->ok) return nullptr;
  if (const std::string problem = internal::ValidateContents(*copy, false); !problem.empty()) {
    *status = LedgerStatus::Error("ledger " + path + ": corrupt: " + problem);
    return nullptr;
  }
  return copy;
}

// A writer may be half-way through an update while the file is read (a slot still active with
// its pid already cleared, say): a few quick retries tell that from lasting corruption.
FileCopy ReadCopy(int fd, const std::string& path, LedgerStatus* status) {
  for (int attempt = 0;; ++attempt) {
    FileCopy copy = ReadCopyOnce(fd, path, status);
    if (copy != nullptr || attempt == 4) return copy;
    const struct timespec pause = {0, 2'000'000};
    nanosleep(&pause, nullptr);
  }
}

LedgerStatus PrepareDirectory(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  if (path == DefaultLedgerPath()) return internal::EnsurePrivateDirectory(dir);  // shared /tmp
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) return LedgerStatus::Ok();  // the deployment's choice
  return internal::EnsurePrivateDirectory(dir);
}

}  // namespace

struct Ledger::Impl {
  std::string path;
  int fd = -1;
  bool read_only = false;
  File* file = nullptr;  // the shared mapping, or (read-only) the copy taken at open
  FileCopy copy;         // owns `file` when read-only
  // Health: 0 = ok, 1 = being recorded, 2 = `problem` set. Lock-free so that a fork() in the
  // middle cannot leave it locked.
  mutable std::atomic<int> health_state{0};
  mutable std::string problem;

  ~Impl() {
    if (file != nullptr && !read_only) munmap(file, sizeof(File));
    if (fd >= 0) close(fd);
  }

  void Fail(const std::string& message) const {
    int expected = 0;
    if (!health_state.compare_exchange_strong(expected, 1)) return;  // keep the first
    problem = "ledger " + path + ": " + message;
    health_state.store(2, std::memory_order_release);
  }

  LedgerStatus Health() const {
    const int state = health_state.load(std::memory_order_acquire);
    if (state == 0) return LedgerStatus::Ok();
    return LedgerStatus::Error(state == 2 ? problem : "ledger " + path + ": a problem is being recorded");
  }

  bool Lock(bool reclaim_if_due) const;
  void Unlock() const { pthread_mutex_unlock(&file->header.mutex); }

  void Reclaim() const {
    internal::ReclaimDeadSlots(file, IsProcessAlive, Ledger::ClockNs());
    file->header.last_reclaim_ns = CoarseNs();
  }

  // Under the lock: registers the process, reclaiming the dead first when the table is full.
  int RegisterLocked(int32_t pid, int32_t host_pid, uint64_t start_time) const {
    int slot = internal::RegisterLocked(file, pid, host_pid, start_time);
    if (slot < 0) {
      Reclaim();
      slot = internal::RegisterLocked(file, pid, host_pid, start_time);
    }
    return slot;
  }

  bool Writable() const { return !read_only && file != nullptr; }

  // TryReserve / TrySpill and Release / ReleaseSpill: one budget's admission protocol.
  bool Admit(internal::Admission (*admit)(File*, int, int, uint64_t, uint64_t), uint64_t format::DeviceRecord::*refusals,
             int slot, int device, uint64_t bytes, uint64_t keep_free);
  void GiveBack(bool (*give_back)(File*, int, int, uint64_t), const char* what, int slot, int device, uint64_t bytes);

  static std::unique_ptr<Impl> OpenWritable(const std::string& path, const LimitSet* create_with, mode_t mode,
                                            bool* created, LedgerStatus* status);
  LedgerStatus MapAndReconcile();
  // Under the lock: validates, and runs `then` only when the contents are fine.
  template <typename Fn>
  LedgerStatus ValidateThen(Fn then);
};

bool Ledger::Impl::Lock(bool reclaim_if_due) const {
  pthread_mutex_t* mutex = &file->header.mutex;
  int rc = pthread_mutex_trylock(mutex);  // the uncontended path reads no clock
  if (rc == EBUSY) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += kLockTimeoutNs / 1'000'000'000;
    rc = pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, &deadline);
  }
  if (rc == EOWNERDEAD) {
    // A process died holding the lock, perhaps half-way through an update: the totals are
    // redundant sums, so recompute them from the slots; its slot is reclaimed right after.
    internal::RepairAfterOwnerDeath(file);
    rc = pthread_mutex_consistent(mutex);
    if (rc != 0) {
      pthread_mutex_unlock(mutex);
      Fail(std::string("cannot make the lock consistent after its owner died: ") + strerror(rc));
      return false;
    }
  }
  if (rc != 0) {
    Fail(rc == ETIMEDOUT         ? "lock not acquired within 10 s (held by a stopped process, or corrupt)"
         : rc == ENOTRECOVERABLE ? "lock is not recoverable (an owner died and nobody repaired it)"
                                 : std::string("cannot lock: ") + strerror(rc));
    return false;
  }
  if (reclaim_if_due && internal::ReclaimDue(*file, CoarseNs())) Reclaim();
  return true;
}

std::unique_ptr<Ledger::Impl> Ledger::Impl::OpenWritable(const std::string& path, const LimitSet* create_with,
                                                         mode_t mode, bool* created, LedgerStatus* status) {
  *created = false;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 3; ++attempt) {
    bool missing = false;
    fd = internal::OpenLedgerFile(path, true, &missing, status);
    if (fd >= 0 || !missing || create_with == nullptr) break;
    bool made = false;
    *status = internal::CreateLedgerFile(path, *create_with, mode, &made);
    if (!status->ok) return nullptr;
    *created = *created || made;
  }
  if (fd < 0) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = fd;
  *status = impl->MapAndReconcile();
  if (!status->ok) return nullptr;
  return impl;
}

LedgerStatus Ledger::Impl::MapAndReconcile() {
  struct stat st;
  if (fstat(fd, &st) != 0) return LedgerStatus::Error("ledger " + path + ": cannot stat: " + strerror(errno));
  alignas(format::Header) unsigned char header[sizeof(format::Header)] = {};
  const ssize_t got = pread(fd, header, sizeof(header), 0);
  LedgerStatus status = internal::CheckShape(path, header, got < 0 ? 0 : static_cast<uint64_t>(got),
                                             static_cast<uint64_t>(st.st_size));
  if (!status.ok) return status;
  file = internal::MapFile(fd, path, &status);
  if (file == nullptr) return status;
  // The size was checked on the fd; a file swapped in between cannot be: the mapping is of fd.
  return internal::ReconcileBoot(fd, file, path);
}

template <typename Fn>
LedgerStatus Ledger::Impl::ValidateThen(Fn then) {
  if (!Lock(false)) return Health();
  const std::string problem = internal::ValidateContents(*file, true);
  LedgerStatus status = LedgerStatus::Ok();
  if (problem.empty()) {
    status = then();
  } else {
    status = LedgerStatus::Error("ledger " + path + ": corrupt: " + problem);
  }
  Unlock();
  return status;
}

Ledger::Ledger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ledger::~Ledger() = default;

LedgerStatus Ledger::WriteLimits(const std::string& path, const LimitSet& limits) {
  if (const std::string problem = ValidateLimitSet(limits); !problem.empty()) {
    return LedgerStatus::Error("ledger " + path + ": invalid limits: " + problem);
  }
  LedgerStatus status;
  bool created = false;
  std::unique_ptr<Impl> impl = Impl::OpenWritable(path, &limits, 0644, &created, &status);
  if (impl == nullptr || created) return status;
  return impl->ValidateThen([&] {
    const std::string conflict = internal::ApplyLimitsLocked(impl->file, limits);
    if (conflict.empty()) return LedgerStatus::Ok();
    return LedgerStatus::Error("ledger " + path + ": limits not written: " + conflict);
  });
}

std::unique_ptr<Ledger> Ledger::Open(const std::string& path, const LimitSet& env_limits, LedgerStatus* status,
                                     std::string* disagreement, const Opener* opener, int* slot,
                                     std::string* replaced) {
  LedgerStatus local;
  if (status == nullptr) status = &local;
  if (disagreement != nullptr) disagreement->clear();
  if (replaced != nullptr) replaced->clear();
  if (slot != nullptr) *slot = -1;
  LimitSet create_with = env_limits;
  create_with.authority = Authority::kLibrary;
  if (const std::string problem = ValidateLimitSet(create_with); !problem.empty()) {
    *status = LedgerStatus::Error("ledger " + path + ": invalid limits from the environment: " + problem);
    return nullptr;
  }
  *status = PrepareDirectory(path);
  if (!status->ok) return nullptr;
  bool created = false;
  std::unique_ptr<Impl> impl = Impl::OpenWritable(path, &create_with, 0600, &created, status);
  if (impl == nullptr) return nullptr;
  File* file = impl->file;
  *status = impl->ValidateThen([&] {
    if (internal::ReclaimDue(*file, CoarseNs())) impl->Reclaim();
    const LimitSet in_file = internal::LimitsOf(*file);
    std::string diff = CompareLimits(in_file, env_limits);
    if (!diff.empty() && opener != nullptr && opener->states_limits && in_file.authority == Authority::kLibrary) {
      impl->Reclaim();  // who still holds it, now
      if (!internal::AnyLiveSlot(*file)) {
        const std::string conflict = internal::ApplyLimitsLocked(file, create_with);
        if (conflict.empty()) {
          if (replaced != nullptr) {
            *replaced = "ledger " + path + " (limits written by library, no live process registered) takes this "
                        "process's environment's limits (the file's vs the environment's): " + diff;
          }
          diff.clear();
        } else {
          diff += " (not replaced: " + conflict + ")";
        }
      }
    }
    if (!diff.empty() && disagreement != nullptr) {
      *disagreement = "ledger " + path + " (limits written by " + AuthorityName(in_file.authority) +
                      ") disagrees with this process's environment: " + diff + "; the ledger's limits apply";
    }
    if (opener != nullptr && opener->pid > 0) {
      const int got = impl->RegisterLocked(opener->pid, opener->host_pid, opener->start_time);
      if (slot != nullptr) *slot = got;
    }
    return LedgerStatus::Ok();
  });
  if (!status->ok) return nullptr;
  return std::unique_ptr<Ledger>(new Ledger(std::move(impl)));
}

std::unique_ptr<Ledger> Ledger::OpenReadOnly(const std::string& path, LedgerStatus* status) {
  LedgerStatus local;
  if (status == nullptr) status = &local;
  bool missing = false;
  const int fd = internal::OpenLedgerFile(path, false, &missing, status);
  if (fd < 0) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = fd;
  impl->read_only = true;
  impl->copy = ReadCopy(fd, path, status);
  if (impl->copy == nullptr) return nullptr;
  impl->file = impl->copy.get();
  *status = LedgerStatus::Ok();
  return std::unique_ptr<Ledger>(new Ledger(std::move(impl)));
}

int Ledger::RegisterProcess(int32_t pid, int32_t host_pid, uint64_t start_time) {
  Impl& m = *impl_;
  if (pid <= 0 || !m.Writable() || !m.Lock(true)) return -1;
  const int slot = m.RegisterLocked(pid, host_pid, start_time);
  m.Unlock();
  return slot;
}

void Ledger::UnregisterProcess(int slot) {
  Impl& m = *impl_;
  if (slot < 0 || slot >= kLedgerMaxProcesses || !m.Writable() || !m.Lock(false)) return;
  if (internal::HoldsCharges(m.file->slots[slot])) internal::FreeSlot(m.file, slot);
  m.Unlock();
}

namespace {

bool ValidUuid(const std::string& uuid) {
  if (uuid.empty() || uuid.size() >= format::kUuidBytes) return false;
  for (const char c : uuid) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

int Ledger::BindDevice(int ordinal, const std::string& uuid, std::string* error) {
  Impl& m = *impl_;
  std::string local;
  if (error == nullptr) error = &local;
  if (ordinal < 0 || ordinal >= kLedgerMaxDevices || !ValidUuid(uuid)) {
    *error = "ledger " + m.path + ": cannot bind ordinal " + std::to_string(ordinal) + " to \"" + uuid +
             "\": ordinal out of range or uuid not 1..63 printable characters";
    return -1;
  }
  if (!m.Writable()) {
    *error = "ledger " + m.path + ": opened read-only";
    return -1;
  }
  if (!m.Lock(false)) {
    *error = m.Health().message;
    return -1;
  }
  const int device = internal::BindDeviceLocked(m.file, ordinal, uuid, error);
  m.Unlock();
  if (device < 0) *error = "ledger " + m.path + ": " + *error;
  return device;
}

uint64_t Ledger::MemoryLimit(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->devices[device].memory_limit.load(kRelaxed);
}

uint64_t Ledger::HostLimit(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->devices[device].host_limit.load(kRelaxed);
}

int Ledger::SmLimit(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return static_cast<int>(impl_->file->devices[device].sm_limit.load(kRelaxed));
}

int Ledger::SmSoftLimit(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return static_cast<int>(impl_->file->devices[device].sm_soft_limit.load(kRelaxed));
}

compute::ComputeShareState* Ledger::ComputeState(int device) const {
  if (impl_->read_only || device < 0 || device >= kLedgerMaxDevices) return nullptr;
  return &impl_->file->compute[device];
}

compute::BusyRing* Ledger::ComputeBusy(int device) const {
  if (impl_->read_only || device < 0 || device >= kLedgerMaxDevices) return nullptr;
  return &impl_->file->busy[device];
}

int Ledger::TaskPriority() const {
  return static_cast<int>(impl_->file->header.task_priority.load(kRelaxed));
}

int Ledger::DeviceCount() const {
  const Impl& m = *impl_;
  if (m.read_only) return static_cast<int>(m.file->header.device_count);
  if (!m.Lock(false)) return 0;
  const int count = static_cast<int>(m.file->header.device_count);
  m.Unlock();
  return count;
}

LimitSet Ledger::Limits() const {
  const Impl& m = *impl_;
  if (m.read_only) return internal::LimitsOf(*m.file);
  if (!m.Lock(false)) return LimitSet{};
  LimitSet limits = internal::LimitsOf(*m.file);
  m.Unlock();
  return limits;
}

namespace {

using AdmitFn = Admission (*)(File*, int, int, uint64_t, uint64_t);
using GiveBackFn = bool (*)(File*, int, int, uint64_t);

}  // namespace

// Admission with one retry after reclaiming dead processes; `refusals` counts a final refusal.
bool Ledger::Impl::Admit(AdmitFn admit, uint64_t format::DeviceRecord::*refusals, int slot, int device,
                         uint64_t bytes, uint64_t keep_free) {
  if (!Writable() || !Lock(true)) return false;
  Admission admission = admit(file, slot, device, bytes, keep_free);
  if (admission == Admission::kRefused) {
    // Dead processes may hold what this one needs: reclaim now rather than at the next interval
    // (a slot that starts to drain returns its host bytes at once, its device bytes later).
    Reclaim();
    admission = admit(file, slot, device, bytes, keep_free);
    if (admission == Admission::kRefused) ++(file->devices[device].*refusals);
  }
  Unlock();
  return admission == Admission::kAdmitted;
}

void Ledger::Impl::GiveBack(GiveBackFn give_back, const char* what, int slot, int device, uint64_t bytes) {
  if (!Writable() || !Lock(true)) return;
  const bool exact = give_back(file, slot, device, bytes);
  Unlock();
  if (!exact) {
    Fail(std::string(what) + " of " + std::to_string(bytes) + " bytes on device " + std::to_string(device) +
         " by slot " + std::to_string(slot) + " exceeds what the slot holds (or the slot/device is invalid)");
  }
}

bool Ledger::TryReserve(int slot, int device, uint64_t bytes, uint64_t keep_free) {
  return impl_->Admit(internal::ReserveLocked, &format::DeviceRecord::oom_refusals, slot, device, bytes, keep_free);
}

void Ledger::Release(int slot, int device, uint64_t bytes) {
  impl_->GiveBack(internal::ReleaseLocked, "release", slot, device, bytes);
}

bool Ledger::TrySpill(int slot, int device, uint64_t bytes) {
  return impl_->Admit(internal::SpillLocked, &format::DeviceRecord::spill_refusals, slot, device, bytes, 0);
}

void Ledger::ReleaseSpill(int slot, int device, uint64_t bytes) {
  impl_->GiveBack(internal::ReleaseSpillLocked, "release of spilled memory", slot, device, bytes);
}

void Ledger::SetOverhead(int slot, int device, uint64_t bytes) {
  Impl& m = *impl_;
  if (!m.Writable() || !m.Lock(true)) return;
  internal::SetOverheadLocked(m.file, slot, device, bytes);
  m.Unlock();
}

uint64_t Ledger::DeviceUsed(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->devices[device].used.load(kRelaxed);
}

uint64_t Ledger::SlotCharged(int slot, int device) const {
  if (slot < 0 || slot >= kLedgerMaxProcesses || device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->slots[slot].charged[device].load(kRelaxed);
}

uint64_t Ledger::SlotOverhead(int slot, int device) const {
  if (slot < 0 || slot >= kLedgerMaxProcesses || device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->slots[slot].overhead[device].load(kRelaxed);
}

uint64_t Ledger::DeviceSpilled(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->devices[device].spilled.load(kRelaxed);
}

uint64_t Ledger::SlotSpilled(int slot, int device) const {
  if (slot < 0 || slot >= kLedgerMaxProcesses || device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->slots[slot].spilled[device].load(kRelaxed);
}

int Ledger::ApplyDriverView(int device, const DriverProcess* processes, int count, uint64_t read_at_ns) {
  Impl& m = *impl_;
  if (count < 0 || (count > 0 && processes == nullptr) || !m.Writable() || !m.Lock(true)) return 0;
  const int freed = internal::ApplyDriverViewLocked(m.file, device, processes, count, read_at_ns);
  m.Unlock();
  return freed;
}

uint64_t Ledger::ClockNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

void Ledger::NoteContextBytes(int device, uint64_t bytes) {
  Impl& m = *impl_;
  if (device < 0 || device >= kLedgerMaxDevices || bytes == 0 || !m.Writable() || !m.Lock(true)) return;
  if (device < static_cast<int>(m.file->header.device_count)) {
    format::AtomicU64& known = m.file->devices[device].context_bytes;
    known.store(std::max(known.load(kRelaxed), std::min(bytes, format::kMaxPlausibleBytes)), kRelaxed);
  }
  m.Unlock();
}

uint64_t Ledger::ContextBytes(int device) const {
  if (device < 0 || device >= kLedgerMaxDevices) return 0;
  return impl_->file->devices[device].context_bytes.load(kRelaxed);
}

int Ledger::ReclaimDead() {
  Impl& m = *impl_;
  if (!m.Writable() || !m.Lock(false)) return 0;
  const uint64_t before = m.file->header.reclaimed_processes;
  m.Reclaim();
  const int reclaimed = static_cast<int>(m.file->header.reclaimed_processes - before);
  m.Unlock();
  return reclaimed;
}

Snapshot Ledger::Read() const {
  const Impl& m = *impl_;
  Snapshot snapshot;
  snapshot.path = m.path;
  bool same_boot = true;
  if (m.read_only) {
    LedgerStatus status;
    const FileCopy copy = ReadCopy(m.fd, m.path, &status);
    if (copy == nullptr) {
      m.Fail(status.message);
      return snapshot;
    }
    snapshot = internal::SnapshotOf(*copy, m.path);
    const std::string boot = internal::CurrentBootId();
    same_boot = boot.empty() || internal::FixedString(copy->header.boot_id, format::kBootIdBytes) == boot;
  } else {
    if (!m.Lock(false)) return snapshot;
    snapshot = internal::SnapshotOf(*m.file, m.path);
    m.Unlock();
  }
  for (ProcessUsage& process : snapshot.processes) {  // syscalls: outside the lock
    process.alive = same_boot && IsProcessAlive(process.pid, process.start_time);
  }
  return snapshot;
}

LedgerStatus Ledger::Health() const { return impl_->Health(); }
const std::string& Ledger::path() const { return impl_->path; }
bool Ledger::read_only() const { return impl_->read_only; }

void Ledger::HoldLockForTesting(int64_t hold_ns, void (*on_locked)(void*), void* arg) {
  Impl& m = *impl_;
  if (!m.Writable() || !m.Lock(false)) return;
  if (on_locked != nullptr) on_locked(arg);
  struct timespec pause = {static_cast<time_t>(hold_ns / 1'000'000'000), static_cast<long>(hold_ns % 1'000'000'000)};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
  m.Unlock();
}

}  // namespace vgpu::ledger
