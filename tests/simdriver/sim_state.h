// The simulated GPU's shared state: device memory accounting and the execution timeline.
//
// TEST DOUBLE ONLY. Part of the simulated libcuda/libnvidia-ml used by CI; never deployed.
//
// With VGPU_SIM_STATE set, the state lives in a memory-mapped file so that every process using
// the simulation sees one set of GPUs: memory charged per device and per process, and one
// execution engine per device shared by all processes. Without it, the same layout lives in
// anonymous private memory (one process, but shared by the CUDA and NVML halves because both
// link this library, libvgpu-sim-core.so).
//
// The layout is a file format (README.md, "Shared-state file"): fixed-width fields, magic and
// layout version, static_asserts below. Its mutex is a robust, process-shared pthread mutex: a
// process killed while holding it leaves it recoverable (EOWNERDEAD -> pthread_mutex_consistent).
// Processes are identified by pid + start time (field 22 of /proc/<pid>/stat); the bytes of a
// dead process (gone, zombie, or pid reused) are reclaimed the next time anyone reaps. A fork()ed
// child gets a slot of its own the first time it charges anything.
//
// Thread safety: every public method takes the state's mutex; all are safe from any thread.
// Callers that also hold a process-local mutex take it first (lock order: local, then shared).
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim_config.h"

namespace vgpusim {

namespace layout {

inline constexpr uint64_t kMagic = 0x314d495355504756ull;  // "VGPUSIM1" little-endian
inline constexpr uint32_t kVersion = 2;
inline constexpr int kMaxProcesses = 128;
inline constexpr int kBusyRingSize = 16384;
inline constexpr int kMaxShares = 256;

struct BusyInterval {
  uint64_t start_ns;  // CLOCK_MONOTONIC
  uint64_t end_ns;
};

struct DeviceRecord {
  uint64_t total_bytes;
  uint64_t busy_until_ns;   // end of the last kernel scheduled on this device
  uint64_t ring_count;      // intervals ever appended; newest is ring[(ring_count-1) % size]
  uint64_t high_water_bytes;  // the most ever used at once since the geometry was last reset
  uint64_t reserved[4];
  BusyInterval ring[kBusyRingSize];
};

struct ProcessRecord {
  int32_t pid;              // 0: free slot
  uint32_t reserved0;
  uint64_t start_time;      // clock ticks after boot, /proc/<pid>/stat field 22
  uint64_t used_bytes[kMaxDevices];
  uint32_t context_count[kMaxDevices];
  uint64_t dead_since_ns;   // found dead at (CLOCK_MONOTONIC); its memory goes VGPU_SIM_TEARDOWN_MS later
  uint64_t reserved;
};

struct ShareRecord {
  uint64_t id;              // 0: free slot
  uint64_t size;
  uint64_t owner_start_time;
  int32_t owner_pid;        // the exporter, whose used_bytes carry the charge
  uint32_t device;
  uint32_t refs;            // live handles in all processes
  uint32_t reserved0;
  uint64_t reserved[3];
};

struct StateFile {
  uint64_t magic;
  uint32_t version;
  uint32_t device_count;
  uint64_t file_bytes;      // sizeof(StateFile)
  uint64_t reserved0[5];
  union {
    pthread_mutex_t mutex;
    unsigned char mutex_space[64];
  };
  uint64_t next_share_id;
  uint64_t reserved1[7];
  DeviceRecord devices[kMaxDevices];
  ProcessRecord processes[kMaxProcesses];
  ShareRecord shares[kMaxShares];
};

static_assert(sizeof(pthread_mutex_t) <= 64);
static_assert(sizeof(BusyInterval) == 16);
static_assert(sizeof(DeviceRecord) == 64 + 16 * kBusyRingSize);
static_assert(sizeof(ProcessRecord) == 128);
static_assert(sizeof(ShareRecord) == 64);
static_assert(offsetof(StateFile, mutex) == 64);
static_assert(offsetof(StateFile, next_share_id) == 128);
static_assert(offsetof(StateFile, devices) == 192);
static_assert(offsetof(StateFile, processes) == 192 + kMaxDevices * sizeof(DeviceRecord));
static_assert(offsetof(StateFile, shares) ==
              offsetof(StateFile, processes) + kMaxProcesses * sizeof(ProcessRecord));
static_assert(sizeof(StateFile) == offsetof(StateFile, shares) + kMaxShares * sizeof(ShareRecord));

}  // namespace layout

struct ProcessUsage {
  int32_t pid;
  uint64_t used_bytes;
};

class VGPU_SIM_API SharedState {
 public:
  // Maps config.state_path (created 0600 if absent) or private memory when it is empty, and
  // registers this process. When no live process is registered in an existing file, its geometry
  // (device count, memory per device) and timeline are reset from `config`; otherwise the file's
  // geometry wins and a mismatch is reported on stderr. Returns nullptr with *error set on failure.
  // The returned object is never destroyed.
  // A dead process's memory stays (in used memory and NVML's process list) for
  // config.teardown_ns after a reap first finds it dead, as the real driver tears a killed
  // process's context down after the process is gone.
  static SharedState* Open(const Config& config, std::string* error);

  // Constant after Open.
  int device_count() const { return device_count_; }
  uint64_t total_bytes(int dev) const;

  // Charges `bytes` to this process on `dev` if the device total allows it (reaping dead processes
  // before refusing). Returns false, charging nothing, when it does not fit.
  bool TryCharge(int dev, uint64_t bytes);
  void Uncharge(int dev, uint64_t bytes);

  // Counts this process's contexts on `dev`; the first one also charges `overhead` (false, and
  // nothing counted, when that does not fit), the last one releases it.
  bool OpenContext(int dev, uint64_t overhead);
  void CloseContext(int dev, uint64_t overhead);

  // Reaps dead processes, then returns the bytes used on `dev` by all live processes.
  uint64_t UsedBytes(int dev);
  uint64_t OwnUsedBytes(int dev);
  // The most `dev` ever had in use at once (every charge updates it): what sampling can miss.
  uint64_t HighWaterBytes(int dev);
  // Live processes that have a context or a charge on `dev`, in slot order.
  std::vector<ProcessUsage> Processes(int dev);

  // Execution engine: the work starts at max(earliest_ns, device busy-until) and runs
  // duration_ns; returns its end time. Recorded in the busy-interval ring.
  uint64_t Schedule(int dev, uint64_t earliest_ns, uint64_t duration_ns);
  // Fraction of [now_ns - window_ns, now_ns] during which the device was busy (0..1).
  double BusyFraction(int dev, uint64_t now_ns, uint64_t window_ns);

  // Shareable (exported) VMM allocations. The exporter has already charged `size` on `dev`;
  // CreateShare registers it with one reference and returns its id (0 when the table is full).
  // AddShareRef finds a share by id (false if unknown). Dropping the last reference releases the
  // exporter's charge if the exporter is still alive.
  uint64_t CreateShare(int dev, uint64_t size);
  bool AddShareRef(uint64_t id, int* dev, uint64_t* size);
  void DropShareRef(uint64_t id);

 private:
  class Lock;
  SharedState(layout::StateFile* file, int slot, uint64_t teardown_ns);
  // Clears a dead process's record once its teardown time has passed (starting the clock at the
  // first call that finds it dead).
  void ExpireDeadLocked(layout::ProcessRecord& proc);

  void ReapLocked();
  uint64_t UsedLocked(int dev) const;
  void NoteHighWaterLocked(int dev);
  // This process's record. After fork() the child registers a slot of its own on first use.
  layout::ProcessRecord& Own();

  layout::StateFile* const file_;
  int slot_;        // guarded by the state mutex
  int32_t slot_pid_;  // the pid slot_ was registered for
  int device_count_ = 0;
  const uint64_t teardown_ns_;
};

// Monotonic clock in nanoseconds (shared by all processes on the machine).
VGPU_SIM_API uint64_t NowNs();
// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`.
VGPU_SIM_API void SleepUntil(uint64_t deadline_ns);

}  // namespace vgpusim
