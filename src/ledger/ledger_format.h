// On-disk (and in-memory: the file is mapped) layout of the ledger, layout version 5.
//
// Version 2 appended the compute limiter's shared state (compute::ComputeShareState, one per
// device record, format pinned in compute/compute_state.h) and its offset in the header.
// Version 3 added memory oversubscription: a host spill limit per device record (and a default
// in the header), the host bytes spilled per device and per process slot, so device records grew
// to 192 bytes and process slots to 448. Version 4 keeps the sizes and gives reserved fields a
// meaning: a process slot can be "draining" (its process is dead but the driver may still hold
// its memory: its charges stay until NVML no longer lists it, drain_since_ns / drain_confirmed),
// every device record learns the size of a context (context_bytes, reserved before a context is
// created), and the compute state holds the container's run/rest gate. Version 5 grows the
// compute state to 192 bytes (the container's turn token and its one run for all its processes)
// and appends a compute::BusyRing per device record (the busy intervals the container's
// processes measured, so that none charges another's time twice). Files of other versions are
// refused as a wrong version, never misread.
//
// This header IS the file format; docs/ledger.md describes every field. Rules:
//   - Fixed-width fields only, native byte order (the file never leaves the host), no pointers.
//   - Every offset and size is pinned by a static_assert below. Changing any of them, or the
//     meaning of any field, requires bumping kLayoutVersion; readers refuse other versions.
//   - std::atomic<uint64_t> is used only for fields that are read without the lock (the hot
//     accessors MemoryLimit / SmLimit / DeviceUsed / SlotCharged, HostLimit / DeviceSpilled /
//     SlotSpilled, ContextBytes, TaskPriority) and for `ready`.
//     It must be lock-free and therefore address-free (it works across processes mapping the
//     same file at different addresses). Every other mutable field is plain and is only touched
//     under `mutex` (or, for boot_id, under flock(2) on the file during Open).
//   - Reserved bytes are written as zero and ignored by readers of this version.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "compute/compute_state.h"
#include "ledger/ledger.h"

namespace vgpu::ledger::format {

inline constexpr char kMagic[8] = {'V', 'G', 'P', 'U', 'L', 'D', 'G', 'R'};
inline constexpr uint32_t kLayoutVersion = 5;
// `ready` holds this value once the file is completely initialised (written last, release).
inline constexpr uint64_t kReadyValue = 0x5245'4144'5921'5631ULL;  // "READY!V1"
inline constexpr size_t kUuidBytes = 64;    // NUL-padded; at most 63 characters
inline constexpr size_t kBootIdBytes = 48;  // /proc/sys/kernel/random/boot_id, NUL-padded
inline constexpr size_t kMutexBytes = 64;   // room for pthread_mutex_t on every glibc target
// Counters and limits above this are impossible (no GPU has 8 EiB); a file holding one is corrupt.
inline constexpr uint64_t kMaxPlausibleBytes = uint64_t{1} << 63;

// Active: a live process. Draining: its process is dead, but the driver may not have freed its
// memory yet (a SIGKILLed process's memory stays in NVML for ~100 ms on an H200): its charges
// still count until NVML stops listing it on every device it held, or kDrainTimeoutNs passed.
enum SlotState : uint32_t { kSlotFree = 0, kSlotActive = 1, kSlotDraining = 2 };
inline constexpr uint32_t kMaxSlotState = kSlotDraining;

using AtomicU64 = std::atomic<uint64_t>;
static_assert(AtomicU64::is_always_lock_free, "shared counters must be lock-free (address-free)");
static_assert(sizeof(AtomicU64) == 8 && alignof(AtomicU64) == 8);
static_assert(sizeof(pthread_mutex_t) <= kMutexBytes);

struct Header {
  char magic[8];                 //   0 kMagic
  uint32_t layout_version;       //   8 kLayoutVersion
  uint32_t header_size;          //  12 sizeof(Header)
  uint64_t total_size;           //  16 sizeof(File): the exact file size
  AtomicU64 ready;               //  24 kReadyValue once initialised; anything else = unusable
  uint64_t created_unix_ns;      //  32 CLOCK_REALTIME at creation
  uint32_t max_devices;          //  40 kLedgerMaxDevices
  uint32_t max_processes;        //  44 kLedgerMaxProcesses
  uint32_t device_record_size;   //  48 sizeof(DeviceRecord)
  uint32_t process_slot_size;    //  52 sizeof(ProcessSlot)
  uint64_t devices_offset;       //  56 offsetof(File, devices)
  uint64_t slots_offset;         //  64 offsetof(File, slots)
  char boot_id[kBootIdBytes];    //  72 kernel boot id of the slots' processes (under flock)
  uint64_t compute_offset;       // 120 offsetof(File, compute)
  union {                        // 128 robust, process-shared; guards everything not atomic
    pthread_mutex_t mutex;
    unsigned char mutex_bytes[kMutexBytes];
  };
  uint32_t authority;            // 192 Authority of whoever wrote the limits
  uint32_t device_count;         // 196 records [0, device_count) are in use
  uint64_t default_memory_limit; // 200 bytes, 0 = unlimited; for ordinals without a record
  int32_t default_sm_limit;      // 208 percent, 0 = unlimited
  int32_t default_sm_soft_limit; // 212 percent, 0 = none
  AtomicU64 task_priority;       // 216 0..kMaxTaskPriority (0 = high)
  uint64_t last_reclaim_ns;      // 224 CLOCK_MONOTONIC_COARSE of the last dead-process scan
  uint32_t slot_high_water;      // 232 slots [slot_high_water, max) have never been used
  uint32_t reserved1;            // 236
  uint64_t lock_recoveries;      // 240 times a locker found the owner dead (EOWNERDEAD)
  uint64_t reclaimed_processes;  // 248 dead processes whose charges were reclaimed
  uint64_t limits_generation;    // 256 incremented by every limits write
  uint64_t default_host_limit;   // 264 bytes of host spill per device for ordinals without a record, 0 = none
  unsigned char reserved2[240];  // 272
};

struct DeviceRecord {
  int32_t ordinal;               //   0 CUDA ordinal in the container's view, -1 = by uuid only
  uint32_t reserved0;            //   4
  AtomicU64 memory_limit;        //   8 bytes, 0 = unlimited
  AtomicU64 sm_limit;            //  16 percent 0..100, 0 = unlimited
  AtomicU64 sm_soft_limit;       //  24 percent 0..100, 0 = none
  AtomicU64 used;                //  32 sum over active slots of charged + overhead
  uint64_t peak;                 //  40 highest `used` ever reached
  uint64_t oom_refusals;         //  48 refused reservations
  AtomicU64 context_bytes;       //  56 largest context measured on this device (0 = none yet)
  char uuid[kUuidBytes];         //  64 "GPU-..." / "MIG-...", empty = not bound yet
  AtomicU64 host_limit;          // 128 bytes that may spill to host memory, 0 = oversubscription off
  AtomicU64 spilled;             // 136 sum over active slots of spilled
  uint64_t spill_peak;           // 144 highest `spilled` ever reached
  uint64_t spill_refusals;       // 152 spills refused at the host limit
  unsigned char reserved2[32];   // 160
};

struct alignas(64) ProcessSlot {
  uint32_t state;                        //   0 SlotState
  int32_t pid;                           //   4 pid in the ledger users' pid namespace (> 0)
  int32_t host_pid;                      //   8 pid as the host / NVML sees it
  uint32_t drain_confirmed;              //  12 draining: bit d = NVML no longer lists it on device d
  uint64_t start_time;                   //  16 /proc/<pid>/stat field 22 (0 = unknown)
  uint64_t drain_since_ns;               //  24 draining: CLOCK_MONOTONIC when found dead
  AtomicU64 charged[kLedgerMaxDevices];  //  32 allocations, per device record
  AtomicU64 overhead[kLedgerMaxDevices]; // 160 context/module memory, per device record
  AtomicU64 spilled[kLedgerMaxDevices];  // 288 host-backed (spilled) allocations, per device record
  unsigned char reserved2[32];           // 416
};

struct File {
  Header header;
  DeviceRecord devices[kLedgerMaxDevices];
  ProcessSlot slots[kLedgerMaxProcesses];
  // Compute limiter state per device record (all-zero = initial; lock-free atomics, never under
  // the mutex). Times are CLOCK_MONOTONIC: reset when the boot changes.
  compute::ComputeShareState compute[kLedgerMaxDevices];
  // The container's recent busy intervals per device record (same rules as `compute`).
  compute::BusyRing busy[kLedgerMaxDevices];
};

// --- The format, pinned --------------------------------------------------------------------
static_assert(std::is_standard_layout_v<Header> && std::is_standard_layout_v<DeviceRecord> &&
              std::is_standard_layout_v<ProcessSlot> && std::is_standard_layout_v<File>);
static_assert(kLedgerMaxDevices == 16 && kLedgerMaxProcesses == 1024, "part of layout version 5");

static_assert(sizeof(Header) == 512);
static_assert(offsetof(Header, layout_version) == 8);
static_assert(offsetof(Header, header_size) == 12);
static_assert(offsetof(Header, total_size) == 16);
static_assert(offsetof(Header, ready) == 24);
static_assert(offsetof(Header, created_unix_ns) == 32);
static_assert(offsetof(Header, max_devices) == 40);
static_assert(offsetof(Header, max_processes) == 44);
static_assert(offsetof(Header, device_record_size) == 48);
static_assert(offsetof(Header, process_slot_size) == 52);
static_assert(offsetof(Header, devices_offset) == 56);
static_assert(offsetof(Header, slots_offset) == 64);
static_assert(offsetof(Header, boot_id) == 72);
static_assert(offsetof(Header, compute_offset) == 120);
static_assert(offsetof(Header, mutex) == 128);
static_assert(offsetof(Header, authority) == 192);
static_assert(offsetof(Header, device_count) == 196);
static_assert(offsetof(Header, default_memory_limit) == 200);
static_assert(offsetof(Header, default_sm_limit) == 208);
static_assert(offsetof(Header, default_sm_soft_limit) == 212);
static_assert(offsetof(Header, task_priority) == 216);
static_assert(offsetof(Header, last_reclaim_ns) == 224);
static_assert(offsetof(Header, slot_high_water) == 232);
static_assert(offsetof(Header, lock_recoveries) == 240);
static_assert(offsetof(Header, reclaimed_processes) == 248);
static_assert(offsetof(Header, limits_generation) == 256);
static_assert(offsetof(Header, default_host_limit) == 264);
static_assert(offsetof(Header, reserved2) == 272);

static_assert(sizeof(DeviceRecord) == 192);
static_assert(offsetof(DeviceRecord, memory_limit) == 8);
static_assert(offsetof(DeviceRecord, sm_limit) == 16);
static_assert(offsetof(DeviceRecord, sm_soft_limit) == 24);
static_assert(offsetof(DeviceRecord, used) == 32);
static_assert(offsetof(DeviceRecord, peak) == 40);
static_assert(offsetof(DeviceRecord, oom_refusals) == 48);
static_assert(offsetof(DeviceRecord, context_bytes) == 56);
static_assert(offsetof(DeviceRecord, uuid) == 64);
static_assert(offsetof(DeviceRecord, host_limit) == 128);
static_assert(offsetof(DeviceRecord, spilled) == 136);
static_assert(offsetof(DeviceRecord, spill_peak) == 144);
static_assert(offsetof(DeviceRecord, spill_refusals) == 152);
static_assert(offsetof(DeviceRecord, reserved2) == 160);

static_assert(sizeof(ProcessSlot) == 448);
static_assert(offsetof(ProcessSlot, pid) == 4);
static_assert(offsetof(ProcessSlot, host_pid) == 8);
static_assert(offsetof(ProcessSlot, drain_confirmed) == 12);
static_assert(offsetof(ProcessSlot, start_time) == 16);
static_assert(offsetof(ProcessSlot, drain_since_ns) == 24);
static_assert(kLedgerMaxDevices <= 32, "drain_confirmed has one bit per device");
static_assert(offsetof(ProcessSlot, charged) == 32);
static_assert(offsetof(ProcessSlot, overhead) == 160);
static_assert(offsetof(ProcessSlot, spilled) == 288);
static_assert(offsetof(ProcessSlot, reserved2) == 416);

static_assert(offsetof(File, devices) == 512);
static_assert(offsetof(File, slots) == 3584);
static_assert(sizeof(compute::ComputeShareState) == 192);
static_assert(offsetof(File, compute) == 462336);
static_assert(sizeof(compute::BusyRing) == 8256);
static_assert(offsetof(File, busy) == 465408);
static_assert(sizeof(File) == 597504);

inline constexpr uint64_t kFileSize = sizeof(File);

}  // namespace vgpu::ledger::format
