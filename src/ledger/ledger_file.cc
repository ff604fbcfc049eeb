// The ledger's OS edge: opening, creating and mapping the file, the boot id, directories.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "ledger/ledger_internal.h"

namespace vgpu::ledger::internal {
namespace {

using format::File;
using format::Header;

constexpr int64_t kFlockTimeoutNs = 5'000'000'000;

std::string Problem(const std::string& path, const std::string& what) { return "ledger " + path + ": " + what; }

LedgerStatus ErrnoStatus(const std::string& path, const std::string& what, int err) {
  return LedgerStatus::Error(Problem(path, what + ": " + strerror(err)));
}

std::string N(uint64_t value) { return std::to_string(value); }

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uint64_t RealtimeNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Publishes `tmp` as `path` without ever replacing an existing file.
int LinkNoReplace(const std::string& tmp, const std::string& path) {
  if (link(tmp.c_str(), path.c_str()) == 0) return 0;
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS) return -1;
  // Some file systems (FUSE, vfat) have no hard links; a no-replace rename is just as atomic.
  return renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
}

// Builds a complete ledger in the open, empty temporary file `fd`.
LedgerStatus BuildInto(int fd, const std::string& tmp, const LimitSet& limits, mode_t mode) {
  if (fchmod(fd, mode) != 0) return ErrnoStatus(tmp, "cannot set the mode", errno);  // umask-independent
  if (ftruncate(fd, static_cast<off_t>(format::kFileSize)) != 0) return ErrnoStatus(tmp, "cannot size", errno);
  void* map = mmap(nullptr, format::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return ErrnoStatus(tmp, "cannot map", errno);
  InitFile(static_cast<File*>(map), limits, CurrentBootId(), RealtimeNs());
  munmap(map, format::kFileSize);
  // On a disk-backed /tmp, a crash must not leave a linked file whose data never reached disk.
  if (fdatasync(fd) != 0 && errno != EINVAL) return ErrnoStatus(tmp, "cannot sync", errno);
  return LedgerStatus::Ok();
}


}  // namespace

bool TakeFlock(int fd, int64_t timeout_ns) {
  const int64_t deadline = MonotonicNs() + timeout_ns;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (MonotonicNs() > deadline) return false;
    const struct timespec pause = {0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  return true;
}

std::string CurrentBootId() {
  char buf[format::kBootIdBytes] = {};
  const int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return "";
  std::string id(buf, static_cast<size_t>(n));
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

LedgerStatus EnsurePrivateDirectory(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) == 0) {
    if (chmod(dir.c_str(), 0700) != 0) return ErrnoStatus(dir, "cannot chmod directory", errno);
    return LedgerStatus::Ok();
  }
  if (errno != EEXIST) return ErrnoStatus(dir, "cannot create directory", errno);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return ErrnoStatus(dir, "cannot stat directory", errno);
  if (!S_ISDIR(st.st_mode)) return LedgerStatus::Error(Problem(dir, "not a directory (or a symlink); refused"));
  if (st.st_uid != geteuid()) {
    return LedgerStatus::Error(Problem(dir, "directory owned by uid " + N(st.st_uid) + ", not " + N(geteuid()) + "; refused"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return LedgerStatus::Error(Problem(dir, "directory writable by group or others; refused"));
  }
  return LedgerStatus::Ok();
}

bool InitMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) return false;
  bool ok = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) == 0 &&
            pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) == 0;
  ok = ok && pthread_mutex_init(mutex, &attr) == 0;
  pthread_mutexattr_destroy(&attr);
  return ok;
}

void InitFile(File* file, const LimitSet& limits, const std::string& boot_id, uint64_t now_unix_ns) {
  Header& h = file->header;
  memcpy(h.magic, format::kMagic, sizeof(h.magic));
  h.layout_version = format::kLayoutVersion;
  h.header_size = sizeof(Header);
  h.total_size = sizeof(File);
  h.created_unix_ns = now_unix_ns;
  h.max_devices = kLedgerMaxDevices;
  h.max_processes = kLedgerMaxProcesses;
  h.device_record_size = sizeof(format::DeviceRecord);
  h.process_slot_size = sizeof(format::ProcessSlot);
  h.devices_offset = offsetof(File, devices);
  h.compute_offset = offsetof(File, compute);
  h.slots_offset = offsetof(File, slots);
  memcpy(h.boot_id, boot_id.data(), std::min(boot_id.size(), sizeof(h.boot_id) - 1));
  InitMutex(&h.mutex);
  ApplyLimitsLocked(file, limits);  // validated by the caller: cannot fail on an empty table
  h.ready.store(format::kReadyValue, std::memory_order_release);
}

LedgerStatus CreateLedgerFile(const std::string& path, const LimitSet& limits, mode_t mode, bool* created) {
  *created = false;
  static std::atomic<unsigned> counter{0};
  const std::string tmp = DirectoryOf(path) + "/." + BaseOf(path) + ".tmp." + N(static_cast<uint64_t>(getpid())) +
                          "." + N(counter.fetch_add(1)) + "." + N(RealtimeNs() % 1000000007);
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(path, "cannot create " + tmp, errno);
  LedgerStatus status = BuildInto(fd, tmp, limits, mode);
  close(fd);
  if (status.ok) {
    if (LinkNoReplace(tmp, path) == 0) {
      *created = true;
    } else if (errno != EEXIST) {
      status = ErrnoStatus(path, "cannot create", errno);
    }
  }
  unlink(tmp.c_str());  // after a rename this name is gone already
  return status;
}

int OpenLedgerFile(const std::string& path, bool writable, bool* missing, LedgerStatus* status) {
  *missing = false;
  const int flags = (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  const int fd = open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (err == ENOENT) {
      *missing = true;
      *status = LedgerStatus::Error(Problem(path, "does not exist"));
    } else if (err == ELOOP && lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      *status = LedgerStatus::Error(Problem(path, "is a symbolic link; refused"));
    } else {
      *status = ErrnoStatus(path, writable ? "cannot open for writing" : "cannot open", err);
    }
    return -1;
  }
  struct stat st;
  std::string problem;
  if (fstat(fd, &st) != 0) {
    problem = std::string("cannot stat: ") + strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file; refused";
  } else if (writable && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    problem = "writable by group or others (anyone could rewrite the limits); refused";
  }
  if (!problem.empty()) {
    close(fd);
    *status = LedgerStatus::Error(Problem(path, problem));
    return -1;
  }
  return fd;
}

LedgerStatus CheckShape(const std::string& path, const void* bytes, uint64_t size, uint64_t file_size) {
  const auto bad = [&](const std::string& what) { return LedgerStatus::Error(Problem(path, what)); };
  const uint64_t have = std::min(size, file_size);
  if (have < sizeof(format::kMagic)) return bad("truncated: " + N(file_size) + " bytes, too short for a ledger");
  const Header& h = *static_cast<const Header*>(bytes);
  if (memcmp(h.magic, format::kMagic, sizeof(h.magic)) != 0) return bad("not a vgpu ledger (bad magic)");
  if (have < offsetof(Header, header_size)) return bad("truncated: " + N(file_size) + " bytes, too short for a ledger");
  if (h.layout_version != format::kLayoutVersion) {
    return bad("layout version " + N(h.layout_version) + " is not supported (this build reads version " +
               N(format::kLayoutVersion) + ")");
  }
  if (have < sizeof(Header)) return bad("truncated: " + N(file_size) + " bytes, shorter than the header");
  if (h.header_size != sizeof(Header)) return bad("header size " + N(h.header_size) + ", expected " + N(sizeof(Header)));
  if (h.total_size != sizeof(File)) return bad("total size " + N(h.total_size) + " in the header, expected " + N(sizeof(File)));
  if (file_size < sizeof(File)) return bad("truncated: " + N(file_size) + " of " + N(sizeof(File)) + " bytes");
  if (file_size > sizeof(File)) return bad("wrong size: " + N(file_size) + " bytes, expected " + N(sizeof(File)));
  if (h.max_devices != kLedgerMaxDevices || h.max_processes != kLedgerMaxProcesses ||
      h.device_record_size != sizeof(format::DeviceRecord) || h.process_slot_size != sizeof(format::ProcessSlot) ||
      h.devices_offset != offsetof(File, devices) || h.slots_offset != offsetof(File, slots) ||
      h.compute_offset != offsetof(File, compute)) {
    return bad("table geometry does not match layout version " + N(format::kLayoutVersion));
  }
  if (h.ready.load(std::memory_order_acquire) != format::kReadyValue) {
    return bad("not initialised (its creation was interrupted); remove it to start afresh");
  }
  return LedgerStatus::Ok();
}

File* MapFile(int fd, const std::string& path, LedgerStatus* status) {
  void* map = mmap(nullptr, format::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    *status = ErrnoStatus(path, "cannot map", errno);
    return nullptr;
  }
  return static_cast<File*>(map);
}

LedgerStatus ReconcileBoot(int fd, File* file, const std::string& path) {
  const std::string current = CurrentBootId();
  if (current.empty()) return LedgerStatus::Ok();  // cannot tell boots apart here
  if (!TakeFlock(fd, kFlockTimeoutNs)) return LedgerStatus::Error(Problem(path, "cannot take the file lock (flock) within 5 s"));
  Header& h = file->header;
  const std::string stored = FixedString(h.boot_id, sizeof(h.boot_id));
  if (stored != current) {
    if (!stored.empty()) {
      // No process of this boot has opened the file (each would have recorded the boot id
      // first, under this flock), so nobody can be using the mutex or the slots.
      memset(h.mutex_bytes, 0, sizeof(h.mutex_bytes));
      InitMutex(&h.mutex);
      for (int s = 0; s < kLedgerMaxProcesses; ++s) {
        if (internal::HoldsCharges(file->slots[s])) ++h.reclaimed_processes;
        FreeSlot(file, s);
      }
      h.slot_high_water = 0;
      h.last_reclaim_ns = 0;
      for (int d = 0; d < kLedgerMaxDevices; ++d) {
        file->devices[d].used.store(0, std::memory_order_relaxed);
        file->devices[d].spilled.store(0, std::memory_order_relaxed);
      }
      // The compute state holds CLOCK_MONOTONIC times of the old boot: start afresh.
      memset(static_cast<void*>(file->compute), 0, sizeof(file->compute));
      memset(static_cast<void*>(file->busy), 0, sizeof(file->busy));
    }
    memset(h.boot_id, 0, sizeof(h.boot_id));
    memcpy(h.boot_id, current.data(), std::min(current.size(), sizeof(h.boot_id) - 1));
  }
  flock(fd, LOCK_UN);
  return LedgerStatus::Ok();
}

bool ReadWholeFile(int fd, void* buf, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, static_cast<char*>(buf) + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace vgpu::ledger::internal
