// Internals of the ledger shared by ledger.cc, the file layer and the tests. Not part of the
// contract (ledger.h); may change with the implementation.
//
// Layers:
//   ledger_file.cc   the OS edge: open/create/map the file, boot id, private directories.
//   ledger_state.cc  operations on a File whose lock the caller holds: validation, admission,
//                    binding, reclaim, repair, snapshots. No syscalls except through the
//                    LivenessFn passed in.
//   ledger.cc        the Ledger class: the lock protocol around the two.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "ledger/ledger.h"
#include "ledger/ledger_format.h"

namespace vgpu::ledger::internal {

using format::File;

// --- Processes (process.cc) ------------------------------------------------------------------
struct ProcStat {
  char state = '?';         // field 3: R, S, D, Z (zombie), X (dead), ...
  uint64_t start_time = 0;  // field 22
};
// false when /proc/<pid>/stat cannot be read or parsed.
bool ReadProcStat(int32_t pid, ProcStat* out);

using LivenessFn = bool (*)(int32_t pid, uint64_t start_time);

// --- The file (ledger_file.cc) -------------------------------------------------------------
// /proc/sys/kernel/random/boot_id, or "" when unreadable.
std::string CurrentBootId();

// flock(LOCK_EX) on `fd`, retried every 1 ms for at most `timeout_ns`; false on timeout or error.
bool TakeFlock(int fd, int64_t timeout_ns);

// Creates `dir` 0700, or accepts an existing directory owned by the euid and not writable by
// group/others (and not a symlink).
LedgerStatus EnsurePrivateDirectory(const std::string& dir);

// Writes a fresh, complete ledger holding `limits` into the zeroed `file`; `ready` last.
void InitFile(File* file, const LimitSet& limits, const std::string& boot_id, uint64_t now_unix_ns);

// (Re)initialises the robust, process-shared mutex. Only when no process can be using it.
bool InitMutex(pthread_mutex_t* mutex);

// Creates `path` from `limits` with `mode` unless it exists (built under a temporary name in the
// same directory and link(2)ed into place, so it appears complete or not at all).
// *created says whether this call created it. EEXIST is not an error.
LedgerStatus CreateLedgerFile(const std::string& path, const LimitSet& limits, mode_t mode,
                              bool* created);

// Opens an existing ledger file: no symlink, regular file; for writers not writable by group
// or others. Returns the fd (>= 0) or -1 with *status set; errno ENOENT is left in *missing.
int OpenLedgerFile(const std::string& path, bool writable, bool* missing, LedgerStatus* status);

// Checks the header bytes (`size` bytes available, the file is `file_size` long) before any
// offset in them is trusted: magic, version, sizes, table geometry, ready.
LedgerStatus CheckShape(const std::string& path, const void* bytes, uint64_t size, uint64_t file_size);

// Maps the whole file read/write. nullptr with *status set on failure.
File* MapFile(int fd, const std::string& path, LedgerStatus* status);

// Under flock(2): when the file was last used during another boot, every slot is from a dead
// process and the mutex may be left locked by a vanished thread: reset both, record this boot.
LedgerStatus ReconcileBoot(int fd, File* file, const std::string& path);

// Reads exactly `size` bytes at offset 0 (pread, retried). false on a short read or error.
bool ReadWholeFile(int fd, void* buf, uint64_t size);

// --- State under the lock (ledger_state.cc) --------------------------------------------------
// Every value possible, tables consistent. With check_totals, also: the redundant totals equal
// the sums over the active slots and free slots are clean (only valid under the lock).
// "" when fine, else the problem (without the path).
std::string ValidateContents(const File& file, bool check_totals);

// After EOWNERDEAD: clean half-written free slots and unused records, recompute every total
// from the active slots, raise peaks, count the recovery.
void RepairAfterOwnerDeath(File* file);

// Scans the slots at `now_ns` (Ledger::ClockNs): an active slot whose process is dead
// is freed when it holds no device bytes, else becomes draining (drain_since_ns = now_ns); a
// draining slot is freed once kDrainTimeoutNs passed. Returns the number of slots freed.
int ReclaimDeadSlots(File* file, LivenessFn alive, uint64_t now_ns);
// Ledger::ApplyDriverView under the lock; returns the number of slots freed.
int ApplyDriverViewLocked(File* file, int device, const Ledger::DriverProcess* processes, int count,
                          uint64_t read_at_ns);
// Whether a slot's process's charges count: active or draining.
bool HoldsCharges(const format::ProcessSlot& slot);
// Whether any slot belongs to a process not found dead yet (active; draining slots are dead).
bool AnyLiveSlot(const File& file);
// Returns a slot's charges to the totals and frees it.
void FreeSlot(File* file, int slot);

// Whether ReclaimDeadSlots is due at `now_ns` (CLOCK_MONOTONIC_COARSE). A stored time in the
// future (another boot) counts as due.
bool ReclaimDue(const File& file, uint64_t now_ns);

// Admission under the lock. kInvalid: the slot is not registered or the device not bound.
enum class Admission { kAdmitted, kRefused, kInvalid };
// Charges `bytes` when the device stays within its limit less `keep_free` (a device without a
// limit ignores keep_free); does not count a refusal.
Admission ReserveLocked(File* file, int slot, int device, uint64_t bytes, uint64_t keep_free);
// Returns up to `bytes`; false when the slot held less (then all it held is returned).
bool ReleaseLocked(File* file, int slot, int device, uint64_t bytes);
void SetOverheadLocked(File* file, int slot, int device, uint64_t bytes);
// The same for the host (spill) budget: within the device's host limit; `used` is not touched.
Admission SpillLocked(File* file, int slot, int device, uint64_t bytes, uint64_t keep_free);
bool ReleaseSpillLocked(File* file, int slot, int device, uint64_t bytes);

int RegisterLocked(File* file, int32_t pid, int32_t host_pid, uint64_t start_time);
int BindDeviceLocked(File* file, int ordinal, const std::string& uuid, std::string* error);

// Rewrites the limits (see Ledger::WriteLimits). "" or why nothing was changed.
std::string ApplyLimitsLocked(File* file, const LimitSet& limits);
LimitSet LimitsOf(const File& file);

// Copy for Read(); `alive` left false (the caller checks liveness outside the lock).
Snapshot SnapshotOf(const File& file, const std::string& path);

// Bounded C string of a fixed-width field.
std::string FixedString(const char* bytes, size_t size);

}  // namespace vgpu::ledger::internal
