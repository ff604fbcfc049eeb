// The ledger: one memory-mapped file per container (or per `vgpu run` group) that all of its
// processes share. It holds the authoritative limits per GPU and what every process has charged
// against them. The file format is documented in docs/ledger.md and pinned by static_asserts in
// ledger_format.h.
//
// Model
//   - Devices are keyed by GPU UUID. A ledger created from a per-ordinal configuration binds an
//     ordinal to a UUID the first time a process reports it (BindDevice); all processes of one
//     container see the same CUDA_VISIBLE_DEVICES, so the binding is the same for all of them.
//     A process whose ordinal maps to another UUID gets an error (reported, never ignored).
//     A UUID that is already bound always resolves to its record, whatever ordinal the caller
//     uses for it (one physical GPU = one budget), so a worker started with a narrower
//     CUDA_VISIBLE_DEVICES still charges the right device.
//   - Process slots are identified by pid + process start time (from /proc/<pid>/stat), so a
//     reused pid never inherits a dead process's charges.
//   - Admission is reserve-then-allocate: TryReserve() atomically checks and charges under the
//     ledger lock; the caller releases if the real allocation fails.
//   - Oversubscription: a device with a host limit (> 0) lets allocations that do not fit its
//     memory limit spill into host memory. Spilled bytes are a second budget per device,
//     admitted the same way (TrySpill / ReleaseSpill) and never counted in `used`: the device
//     limit stays hard. A host limit of 0 means the device does not spill.
//   - The lock is a process-shared robust mutex in the file. A process killed while holding it
//     leaves it "owner dead"; the next locker recomputes every device total from the live slots
//     (the totals are redundant sums, so recovery is exact).
//   - Dead processes' bytes are reclaimed automatically: every lock holder scans when at
//     least kReclaimIntervalNs has passed since the last scan, and on every refused reservation.
//     Dead = kill(pid, 0) fails with ESRCH, or /proc/<pid>/stat shows another start time or a
//     zombie. Slots written during an earlier boot (the file's boot id differs) are all dead.
//     A dead process's device memory is not free when the process is: the driver tears its
//     context down afterwards (NVML still listed a SIGKILLed process's memory ~100 ms after it
//     became a zombie on an H200). So a dead slot that holds device bytes first becomes
//     "draining": its bytes keep counting until a reading of the driver taken after it was found
//     dead (ApplyDriverView) no longer lists it on any device it held, or kDrainTimeoutNs passed
//     (nobody read the driver). Dead slots that hold no device bytes are freed at once.
//   - Lock waits are bounded (kLockTimeoutNs). A lock that cannot be taken (timeout, or
//     ENOTRECOVERABLE) makes TryReserve refuse (never "unlimited") and is reported by Health().
//   - Limits are written by the authority (vgpu run, the node daemon). When no authority created
//     the file, the first library process writes the limits from its environment; a later
//     process whose environment disagrees with the ledger is reported (the ledger's limits win).
//
// Thread safety: a Ledger object may be used from any number of threads; all mutation happens
// under the shared robust mutex. Read() takes the lock briefly (a read-only ledger reads the file
// with pread instead and never locks). MemoryLimit, SmLimit, SmSoftLimit, TaskPriority,
// DeviceUsed, SlotCharged, SlotOverhead, HostLimit, DeviceSpilled and SlotSpilled are lock-free
// loads (no syscall, no lock).
// Errors are values (LedgerStatus); nothing here throws or exits.
//
// Hot path cost: TryReserve / Release / SetOverhead take the lock once (an uncontended lock is
// one atomic instruction), read CLOCK_MONOTONIC_COARSE (vDSO, no syscall) and do O(1) work;
// only the periodic dead-process scan makes syscalls.
//
// Files (for users of the API; the format itself is in docs/ledger.md):
//   - A path that is a symlink, not a regular file, or (for writers) writable by group/others
//     is refused. The authority creates ledgers 0644; the library creates them 0600 and, when
//     their directory is missing, creates it 0700.
//   - Creation is race-free: the file is built under a temporary name and link(2)ed into place
//     only once complete, so a half-initialised ledger is never visible under its name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vgpu::compute {
struct ComputeShareState;
struct BusyRing;
}  // namespace vgpu::compute

namespace vgpu::ledger {

inline constexpr int kLedgerMaxDevices = 16;
inline constexpr int kLedgerMaxProcesses = 1024;
inline constexpr int64_t kReclaimIntervalNs = 200'000'000;  // 200 ms
inline constexpr int64_t kLockTimeoutNs = 10'000'000'000;   // 10 s: longer = corrupt or stopped holder
// A draining slot nobody confirmed gone is freed after this (the driver's teardown of a killed
// process took ~100 ms on an H200; without any NVML reading, waiting longer gains nothing).
inline constexpr int64_t kDrainTimeoutNs = 1'000'000'000;

enum class Authority : uint32_t { kLibrary = 0, kVgpuRun = 1, kNodeDaemon = 2 };
inline constexpr uint32_t kMaxAuthority = 2;
// "library", "vgpu run", "node daemon" ("unknown" for anything else).
const char* AuthorityName(Authority authority);

struct LedgerStatus {
  bool ok = true;
  std::string message;  // names the file and what is wrong with it
  static LedgerStatus Ok() { return {}; }
  static LedgerStatus Error(std::string m) { return {false, std::move(m)}; }
};

// Limits for one device as the authority (or the environment) states them.
// Valid: ordinal -1..kLedgerMaxDevices-1 (each at most once), uuid at most 63 printable ASCII
// characters (each at most once), an ordinal or a uuid, memory_limit <= 2^63, percents 0..100.
struct DeviceLimit {
  int ordinal = -1;         // CUDA ordinal in the container's view, or -1 when keyed by uuid only
  std::string uuid;         // "GPU-…"; may be empty until a process binds the ordinal
  uint64_t memory_limit = 0;  // bytes, 0 = unlimited
  int sm_limit = 0;           // percent, 0 = unlimited
  int sm_soft_limit = 0;      // percent, 0 = none
  uint64_t host_limit = 0;    // bytes that may spill to host memory (oversubscription), 0 = none
};

struct LimitSet {
  Authority authority = Authority::kLibrary;
  // Applies to ordinals not listed in `devices` (0 = unlimited).
  uint64_t default_memory_limit = 0;
  int default_sm_limit = 0;
  int default_sm_soft_limit = 0;
  int task_priority = 1;             // 0..100 (kMaxTaskPriority), 0 = high
  std::vector<DeviceLimit> devices;  // at most kLedgerMaxDevices
  uint64_t default_host_limit = 0;   // host spill limit of ordinals not listed (0 = no spilling)
};

// "" when `limits` is valid (see DeviceLimit), else what is wrong with it.
std::string ValidateLimitSet(const LimitSet& limits);

// Where two limit sets differ in effect: per ordinal (a listed device's values, else the
// defaults), per uuid-only device, and the task priority. The authority and the uuids of
// ordinal-keyed devices are not compared. "" when they agree; else a '; '-separated list such
// as "device 0 memory limit 1 GiB vs 2 GiB", `a` first.
std::string CompareLimits(const LimitSet& a, const LimitSet& b);

// Per-device totals, as seen in a snapshot.
struct DeviceUsage {
  int ordinal = -1;
  std::string uuid;
  uint64_t memory_limit = 0;
  uint64_t used = 0;         // sum of live slots' charges (allocations + overhead)
  uint64_t peak = 0;         // highest `used` ever admitted
  uint64_t oom_refusals = 0;
  int index = -1;            // ledger device index (as BindDevice returns it)
  int sm_limit = 0;
  int sm_soft_limit = 0;
  // Compute limiter state (docs/compute.md), zero when no limiter has run on the device:
  int32_t share_ppm = 0;          // measured busy share, moving average, parts per million
  uint64_t busy_ns = 0;           // GPU busy time measured for the container's kernels
  uint64_t throttled_ns = 0;      // time launches were held back
  // Oversubscription (host memory standing in for device memory; not part of `used`):
  uint64_t host_limit = 0;        // 0 = the device does not spill
  uint64_t spilled = 0;           // host bytes spilled by live processes
  uint64_t spill_peak = 0;        // highest `spilled` ever admitted
  uint64_t spill_refusals = 0;    // spills refused at the host limit
  uint64_t context_bytes = 0;     // largest context measured on the device (0 = none yet)
};

struct ProcessUsage {
  int32_t pid = 0;
  int32_t host_pid = 0;      // pid as the host / NVML sees it (== pid outside containers)
  uint64_t start_time = 0;   // clock ticks since boot, /proc/<pid>/stat field 22
  bool alive = false;        // liveness checked when the snapshot was taken (see ReclaimDead)
  bool draining = false;     // dead, its memory still counted until the driver lets it go
  uint64_t charged[kLedgerMaxDevices] = {};   // allocations
  uint64_t overhead[kLedgerMaxDevices] = {};  // context/module memory from NVML reconciliation
  uint64_t spilled[kLedgerMaxDevices] = {};   // host-backed allocations (oversubscription)
  int slot = -1;
};

struct Snapshot {
  std::string path;
  Authority authority = Authority::kLibrary;
  std::vector<DeviceUsage> devices;        // every bound or configured device, by index
  std::vector<ProcessUsage> processes;     // every registered (not yet reclaimed) process
  int task_priority = 1;
  uint64_t default_memory_limit = 0;  // limits of devices not (yet) in `devices`
  int default_sm_limit = 0;
  int default_sm_soft_limit = 0;
  uint64_t default_host_limit = 0;
  uint64_t created_unix_ns = 0;
  uint64_t lock_recoveries = 0;      // times a locker found the lock's owner dead
  uint64_t reclaimed_processes = 0;  // dead processes whose charges were reclaimed
};

class Ledger {
 public:
  // The authority creates the file (mode 0644, parent directory must exist) or rewrites the
  // limits of an existing one. Charges of live processes are kept, and so are device indices
  // and bindings: a listed device is matched to its record by uuid, else by ordinal; records
  // not listed get the new defaults. Errors: invalid `limits`, a listed uuid/ordinal that
  // contradicts an existing binding, more than kLedgerMaxDevices devices, or any file error.
  static LedgerStatus WriteLimits(const std::string& path, const LimitSet& limits);

  // The process that opens the ledger (Open's `opener`).
  struct Opener {
    int32_t pid = 0;
    int32_t host_pid = 0;     // as known, else pid
    uint64_t start_time = 0;  // ProcessStartTime(pid)
    // Its environment states limits (not only which ledger to join): only then may they replace
    // the limits a finished run of the library left in the file.
    bool states_limits = false;
  };

  // A library process opens the ledger, creating it from `env_limits` when absent (then the
  // authority is kLibrary). A corrupt, truncated or wrong-version file yields an error naming
  // the path and the problem; never a crash, never "unlimited". If the file's limits disagree
  // with `env_limits`, *disagreement receives a description (the file's limits are used).
  // With `opener`, the opener is registered under the lock that checks the limits (*slot: its
  // slot, -1 when the table is full), and a file whose limits the library wrote and that no live
  // process holds any more (every registered process dead, after a reclaim) takes `env_limits`
  // when the opener states limits: a new run with other limits is not held to the limits an
  // earlier run left behind. *replaced then receives what changed and *disagreement stays
  // empty. Limits an authority wrote, or a ledger a live process holds, are never replaced; the
  // registration under the same lock makes a second opener find the first one alive.
  static std::unique_ptr<Ledger> Open(const std::string& path, const LimitSet& env_limits,
                                      LedgerStatus* status, std::string* disagreement,
                                      const Opener* opener = nullptr, int* slot = nullptr,
                                      std::string* replaced = nullptr);

  // Opens an existing ledger read-only for `vgpu ps` (never creates, never writes, never locks:
  // the file is read with pread, so a concurrent truncation cannot crash the reader). On a
  // read-only ledger the mutating calls fail (RegisterProcess/BindDevice -1, TryReserve false).
  static std::unique_ptr<Ledger> OpenReadOnly(const std::string& path, LedgerStatus* status);

  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Registers the calling process (pid + start time; host_pid as known, else pid) and returns
  // its slot, reusing a slot only after its process is dead. -1 when the table is full.
  int RegisterProcess(int32_t pid, int32_t host_pid, uint64_t start_time);
  // Marks the slot free and returns its charges to the totals (clean exit).
  void UnregisterProcess(int slot);

  // Ledger device index for the CUDA ordinal with this UUID, binding it on first use.
  // -1 with *error set when the ordinal is already bound to another UUID or the table is full.
  // A device not configured by the limits gets the default limits.
  int BindDevice(int ordinal, const std::string& uuid, std::string* error);

  // Limits of a bound device (0 = unlimited / none). REQUIRES: 0 <= device < DeviceCount()
  // (out of range yields 0; TryReserve refuses such a device).
  uint64_t MemoryLimit(int device) const;
  uint64_t HostLimit(int device) const;  // host spill limit, 0 = the device does not spill
  int SmLimit(int device) const;
  int SmSoftLimit(int device) const;
  int TaskPriority() const;
  int DeviceCount() const;
  // The compute limiter's shared state of a device record, in the mapping (lock-free atomics,
  // used without the ledger lock; valid as long as this Ledger). nullptr for a read-only ledger
  // or a device out of range.
  compute::ComputeShareState* ComputeState(int device) const;
  // The container's recent busy intervals on a device record (compute::BusyRing), or nullptr.
  compute::BusyRing* ComputeBusy(int device) const;
  // The limits now in the file (authority, defaults, one DeviceLimit per device record).
  LimitSet Limits() const;

  // Reserve-then-allocate. Charges `bytes` to `slot` on `device` if the device total plus
  // `keep_free` stays within its limit (keep_free: room admission keeps for memory the driver
  // adds without an allocation call; ignored on a device without a limit); otherwise reclaims
  // dead processes, retries once, and if still refused returns false and counts a refusal. Also
  // false (not counted) for an invalid or unregistered slot, an invalid device, or a lock
  // failure. bytes == 0 always succeeds.
  bool TryReserve(int slot, int device, uint64_t bytes, uint64_t keep_free = 0);
  // Returns `bytes` of the slot's charge (at most what it holds: an over-release is clamped and
  // reported by Health()).
  void Release(int slot, int device, uint64_t bytes);
  // Sets the slot's reconciled overhead on `device` (may shrink or grow; growth is applied even
  // past the limit, since the memory already exists — it is reported, and refuses new charges).
  void SetOverhead(int slot, int device, uint64_t bytes);

  // The host budget of oversubscription, admitted like TryReserve/Release: charges `bytes` of
  // spilled (host-backed) memory to `slot` on `device` if the device's spilled total stays within
  // its host limit (a host limit of 0 admits nothing); otherwise reclaims dead processes, retries
  // once, and if still refused returns false and counts a spill refusal. Never touches `used`.
  bool TrySpill(int slot, int device, uint64_t bytes);
  void ReleaseSpill(int slot, int device, uint64_t bytes);

  // Total charged on the device by every live process (allocations + overhead), the slot's
  // own allocations, and its overhead.
  uint64_t DeviceUsed(int device) const;
  uint64_t SlotCharged(int slot, int device) const;
  uint64_t SlotOverhead(int slot, int device) const;
  // Host bytes spilled on the device by every live process, and by the slot.
  uint64_t DeviceSpilled(int device) const;
  uint64_t SlotSpilled(int slot, int device) const;

  // Reclaims the charges of dead processes now; returns how many slots were freed (dead slots
  // that still hold device bytes become draining instead, see above).
  int ReclaimDead();

  // What the driver (NVML) lists on `device`: per host pid, the bytes it attributes to it.
  struct DriverProcess {
    int32_t host_pid = 0;
    uint64_t bytes = 0;
  };
  // Applies a reading of the driver's per-process list of `device`, taken at `read_at_ns`
  // (ClockNs() read BEFORE the driver was asked): draining slots found dead before that and not
  // listed are confirmed gone on the device (freed once gone from every device they held), and
  // a listed live slot whose driver figure exceeds what it holds (charged + overhead) gets its
  // overhead raised to the difference (memory its own process has not reconciled yet; never
  // lowered here: another process's charges in flight are invisible to this one). Returns how
  // many slots were freed.
  int ApplyDriverView(int device, const DriverProcess* processes, int count, uint64_t read_at_ns);
  // The clock of drain times (CLOCK_MONOTONIC, from the vDSO).
  static uint64_t ClockNs();

  // Context memory: the largest context measured on `device` (0 = none yet). NoteContextBytes
  // raises it; ContextBytes is a lock-free load.
  void NoteContextBytes(int device, uint64_t bytes);
  uint64_t ContextBytes(int device) const;

  // A consistent copy of the ledger (under the lock; a read-only ledger re-reads the file).
  // Does not reclaim. On failure (lock, or a read-only file that became invalid) the snapshot
  // holds only `path`, and Health() says why.
  Snapshot Read() const;

  // Ok, or the first lasting problem seen since Open: the lock timed out or is not
  // recoverable, an over-release, a failed read. Never cleared.
  LedgerStatus Health() const;

  const std::string& path() const;
  bool read_only() const;

  // Test hook: takes the lock, calls on_locked(arg) (may be null), sleeps hold_ns, unlocks.
  // Used to SIGKILL a process while it holds the lock.
  void HoldLockForTesting(int64_t hold_ns, void (*on_locked)(void*), void* arg);

 private:
  struct Impl;
  explicit Ledger(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// pid's start time from /proc/<pid>/stat (field 22); 0 when the process does not exist.
uint64_t ProcessStartTime(int32_t pid);

// Parses the text of a /proc/<pid>/stat file: the state (field 3: R, S, D, Z, X, ...) and the
// start time (field 22, clock ticks since boot). comm (field 2) may hold spaces and ')', so the
// fields are counted after the LAST ')'. false when the text is malformed.
bool ParseProcStat(const char* text, char* state, uint64_t* start_time);

// Whether the process is alive and is the one that had `start_time` (0 = do not compare).
// kill(pid, 0): ESRCH = dead, EPERM = alive; then /proc/<pid>/stat: another start time, or a
// zombie, = dead. When /proc cannot be read, kill's answer stands. pid <= 0 is never alive.
bool IsProcessAlive(int32_t pid, uint64_t start_time);

// The library's default ledger when CUDA_DEVICE_MEMORY_SHARED_CACHE is unset:
// /tmp/vgpu-<euid>/ledger. Open creates the directory 0700 when missing and refuses it when it
// is not a directory owned by the euid or is writable by group/others.
std::string DefaultLedgerPath();

}  // namespace vgpu::ledger
