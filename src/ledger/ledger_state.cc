// Operations on a mapped ledger whose lock the caller holds (see ledger_internal.h).
//
// Invariants (hold whenever the lock is free, restored by RepairAfterOwnerDeath):
//   I1  device_count <= kLedgerMaxDevices, slot_high_water <= kLedgerMaxProcesses.
//   I2  for every device d < device_count:
//         used[d] == sum over active and draining slots s of charged[s][d] + overhead[s][d]
//         peak[d] >= used[d]
//   I3  free slots are all zero (pid, start time, charges, drain fields); slots >= slot_high_water
//       are free; active slots have zero drain fields.
//   I4  no active or draining slot charges a device >= device_count.
//   I5  used[d] <= memory_limit[d] unless SetOverhead pushed it over (memory that exists) or
//       the authority lowered the limit below what is held.
//   I6  spilled[d] == sum over active and draining slots s of spilled[s][d], spill_peak[d] >= spilled[d], and
//       spilled[d] <= host_limit[d] unless the authority lowered the host limit.
// Totals are redundant, so a process killed mid-update loses nothing: the next locker recomputes.
#include <algorithm>
#include <cstring>

#include "common/config.h"
#include "ledger/ledger_internal.h"

namespace vgpu::ledger::internal {
namespace {

using format::DeviceRecord;
using format::kMaxPlausibleBytes;
using format::ProcessSlot;

constexpr auto kRelaxed = std::memory_order_relaxed;

uint64_t Load(const format::AtomicU64& value) { return value.load(kRelaxed); }
void Store(format::AtomicU64& value, uint64_t v) { value.store(v, kRelaxed); }

std::string N(uint64_t value) { return std::to_string(value); }

bool ValidPercent(int64_t value) { return value >= 0 && value <= 100; }

// NUL-terminated within the field, printable ASCII without blanks.
bool ValidUuidField(const char* uuid) {
  for (size_t i = 0; i < format::kUuidBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(uuid[i]);
    if (c == '\0') return true;
    if (c <= ' ' || c > '~') return false;
  }
  return false;
}

void SetUuid(DeviceRecord* record, const std::string& uuid) {
  memset(record->uuid, 0, sizeof(record->uuid));
  memcpy(record->uuid, uuid.data(), std::min(uuid.size(), sizeof(record->uuid) - 1));
}

bool UuidEquals(const DeviceRecord& record, const std::string& uuid) {
  return !uuid.empty() && FixedString(record.uuid, sizeof(record.uuid)) == uuid;
}

std::string CheckHeaderValues(const File& file) {
  const format::Header& h = file.header;
  if (h.authority > kMaxAuthority) return "authority " + N(h.authority) + " is not a known authority";
  if (h.device_count > static_cast<uint32_t>(kLedgerMaxDevices)) {
    return "device count " + N(h.device_count) + " exceeds the maximum " + N(kLedgerMaxDevices);
  }
  if (h.slot_high_water > static_cast<uint32_t>(kLedgerMaxProcesses)) {
    return "process high-water mark " + N(h.slot_high_water) + " exceeds the maximum " + N(kLedgerMaxProcesses);
  }
  if (h.default_memory_limit > kMaxPlausibleBytes) {
    return "default memory limit " + N(h.default_memory_limit) + " is impossible (above 2^63)";
  }
  if (h.default_host_limit > kMaxPlausibleBytes) {
    return "default host spill limit " + N(h.default_host_limit) + " is impossible (above 2^63)";
  }
  if (!ValidPercent(h.default_sm_limit) || !ValidPercent(h.default_sm_soft_limit)) {
    return "default compute limits " + std::to_string(h.default_sm_limit) + "/" +
           std::to_string(h.default_sm_soft_limit) + " are not percentages";
  }
  if (Load(h.task_priority) > static_cast<uint64_t>(kMaxTaskPriority)) {
    return "task priority " + N(Load(h.task_priority)) + " is out of range 0.." + N(kMaxTaskPriority);
  }
  return "";
}

std::string CheckDeviceRecord(const File& file, uint32_t d, bool check_totals) {
  const DeviceRecord& r = file.devices[d];
  const std::string where = "device record " + N(d) + ": ";
  if (r.ordinal < -1 || r.ordinal >= kLedgerMaxDevices) return where + "ordinal " + std::to_string(r.ordinal) + " out of range";
  if (!ValidUuidField(r.uuid)) return where + "uuid is not a printable NUL-terminated string";
  if (r.ordinal == -1 && r.uuid[0] == '\0') return where + "neither an ordinal nor a uuid";
  if (Load(r.memory_limit) > kMaxPlausibleBytes) return where + "memory limit " + N(Load(r.memory_limit)) + " is impossible";
  if (Load(r.sm_limit) > 100 || Load(r.sm_soft_limit) > 100) return where + "compute limits are not percentages";
  if (Load(r.used) > kMaxPlausibleBytes) return where + "used " + N(Load(r.used)) + " is impossible (above 2^63)";
  if (r.peak > kMaxPlausibleBytes || r.oom_refusals > kMaxPlausibleBytes) return where + "peak or refusal count is impossible";
  if (Load(r.context_bytes) > kMaxPlausibleBytes) return where + "context size " + N(Load(r.context_bytes)) + " is impossible";
  if (check_totals && r.peak < Load(r.used)) return where + "peak " + N(r.peak) + " is below used " + N(Load(r.used));
  if (Load(r.host_limit) > kMaxPlausibleBytes) return where + "host spill limit " + N(Load(r.host_limit)) + " is impossible";
  if (Load(r.spilled) > kMaxPlausibleBytes) return where + "spilled " + N(Load(r.spilled)) + " is impossible (above 2^63)";
  if (r.spill_peak > kMaxPlausibleBytes || r.spill_refusals > kMaxPlausibleBytes) {
    return where + "spill peak or spill refusal count is impossible";
  }
  if (check_totals && r.spill_peak < Load(r.spilled)) {
    return where + "spill peak " + N(r.spill_peak) + " is below spilled " + N(Load(r.spilled));
  }
  for (uint32_t e = 0; e < d; ++e) {
    const DeviceRecord& other = file.devices[e];
    if (r.ordinal >= 0 && other.ordinal == r.ordinal) return where + "ordinal " + std::to_string(r.ordinal) + " appears twice";
    if (r.uuid[0] != '\0' && strncmp(r.uuid, other.uuid, sizeof(r.uuid)) == 0) return where + "uuid appears twice";
  }
  return "";
}

std::string CheckDevices(const File& file, bool check_totals) {
  const uint32_t count = file.header.device_count;
  for (uint32_t d = 0; d < count; ++d) {
    if (std::string problem = CheckDeviceRecord(file, d, check_totals); !problem.empty()) return problem;
  }
  for (uint32_t d = count; check_totals && d < static_cast<uint32_t>(kLedgerMaxDevices); ++d) {
    if ((Load(file.devices[d].used) | Load(file.devices[d].spilled)) != 0) {
      return "unused device record " + N(d) + " has used or spilled bytes";
    }
  }
  return "";
}

// Per-device sums over the active slots: device charges (charged + overhead) and spilled bytes.
struct SlotSums {
  unsigned __int128 used[kLedgerMaxDevices] = {};
  unsigned __int128 spilled[kLedgerMaxDevices] = {};
};

std::string CheckActiveSlot(const File& file, int s, SlotSums* sums) {
  const ProcessSlot& p = file.slots[s];
  const std::string where = "process slot " + std::to_string(s) + ": ";
  if (p.pid <= 0 || p.host_pid <= 0) return where + "pid " + std::to_string(p.pid) + "/" + std::to_string(p.host_pid) + " is impossible";
  for (int d = 0; d < kLedgerMaxDevices; ++d) {
    const uint64_t charged = Load(p.charged[d]);
    const uint64_t overhead = Load(p.overhead[d]);
    const uint64_t spilled = Load(p.spilled[d]);
    if (charged > kMaxPlausibleBytes || overhead > kMaxPlausibleBytes) return where + "charge on device " + N(d) + " is impossible";
    if (spilled > kMaxPlausibleBytes) return where + "spill on device " + N(d) + " is impossible";
    if (d >= static_cast<int>(file.header.device_count) && (charged | overhead | spilled) != 0) {
      return where + "charges device " + N(d) + ", which is not in the ledger";
    }
    sums->used[d] += static_cast<unsigned __int128>(charged) + overhead;
    sums->spilled[d] += spilled;
  }
  return "";
}

bool SlotIsClean(const ProcessSlot& p) {
  if (p.pid != 0 || p.host_pid != 0 || p.start_time != 0 || p.drain_since_ns != 0 || p.drain_confirmed != 0) return false;
  for (int d = 0; d < kLedgerMaxDevices; ++d) {
    if ((Load(p.charged[d]) | Load(p.overhead[d]) | Load(p.spilled[d])) != 0) return false;
  }
  return true;
}

std::string CheckSlots(const File& file, bool check_totals) {
  SlotSums sums;
  for (int s = 0; s < kLedgerMaxProcesses; ++s) {
    const ProcessSlot& p = file.slots[s];
    if (p.state > format::kMaxSlotState) return "process slot " + std::to_string(s) + ": state " + N(p.state) + " out of range";
    if (HoldsCharges(p)) {
      if (s >= static_cast<int>(file.header.slot_high_water)) return "process slot " + std::to_string(s) + " is in use above the high-water mark";
      if (std::string problem = CheckActiveSlot(file, s, &sums); !problem.empty()) return problem;
      if (p.state == format::kSlotActive && (p.drain_since_ns != 0 || p.drain_confirmed != 0)) {
        return "process slot " + std::to_string(s) + " is active but has drain fields";
      }
      if ((p.drain_confirmed >> kLedgerMaxDevices) != 0) {
        return "process slot " + std::to_string(s) + ": drain bits beyond the device table";
      }
    } else if (check_totals && !SlotIsClean(p)) {
      return "free process slot " + std::to_string(s) + " is not empty";
    }
  }
  for (uint32_t d = 0; check_totals && d < file.header.device_count; ++d) {
    if (sums.used[d] != Load(file.devices[d].used)) {
      return "device record " + N(d) + ": used " + N(Load(file.devices[d].used)) +
             " differs from what its processes hold";
    }
    if (sums.spilled[d] != Load(file.devices[d].spilled)) {
      return "device record " + N(d) + ": spilled " + N(Load(file.devices[d].spilled)) +
             " differs from what its processes spilled";
    }
  }
  return "";
}

void ClearDeviceRecord(DeviceRecord* r) {
  r->ordinal = 0;
  r->reserved0 = 0;
  for (format::AtomicU64* v : {&r->memory_limit, &r->sm_limit, &r->sm_soft_limit, &r->used, &r->host_limit, &r->spilled}) {
    Store(*v, 0);
  }
  r->peak = 0;
  r->oom_refusals = 0;
  Store(r->context_bytes, 0);
  memset(r->uuid, 0, sizeof(r->uuid));
  r->spill_peak = 0;
  r->spill_refusals = 0;
  memset(r->reserved2, 0, sizeof(r->reserved2));
}

void ClearSlot(ProcessSlot* p) {
  p->state = format::kSlotFree;  // first: a lock-free reader then skips the slot
  for (int d = 0; d < kLedgerMaxDevices; ++d) {
    Store(p->charged[d], 0);
    Store(p->overhead[d], 0);
    Store(p->spilled[d], 0);
  }
  p->pid = 0;
  p->host_pid = 0;
  p->start_time = 0;
  p->drain_since_ns = 0;
  p->drain_confirmed = 0;
}

void SetRecordLimits(DeviceRecord* r, uint64_t memory, int sm, int soft, uint64_t host) {
  Store(r->memory_limit, memory);
  Store(r->sm_limit, static_cast<uint64_t>(sm));
  Store(r->sm_soft_limit, static_cast<uint64_t>(soft));
  Store(r->host_limit, host);
}

void InitDeviceRecord(DeviceRecord* r, int ordinal, const std::string& uuid) {
  ClearDeviceRecord(r);
  r->ordinal = ordinal;
  SetUuid(r, uuid);
}

bool ValidSlot(const File& file, int slot) {
  return slot >= 0 && slot < static_cast<int>(file.header.slot_high_water) &&
         file.slots[slot].state == format::kSlotActive;
}

bool ValidDevice(const File& file, int device) {
  return device >= 0 && device < static_cast<int>(file.header.device_count);
}

int FindByUuid(const File& file, const std::string& uuid) {
  for (uint32_t d = 0; d < file.header.device_count; ++d) {
    if (UuidEquals(file.devices[d], uuid)) return static_cast<int>(d);
  }
  return -1;
}

int FindByOrdinal(const File& file, int ordinal) {
  for (uint32_t d = 0; ordinal >= 0 && d < file.header.device_count; ++d) {
    if (file.devices[d].ordinal == ordinal) return static_cast<int>(d);
  }
  return -1;
}

void RaisePeak(DeviceRecord* r, uint64_t used) { r->peak = std::max(r->peak, used); }

// One budget of a device: its total, the most the total may reach (2^63 for a device without a
// memory limit; a host limit of 0 admits nothing), the slot's share and the high-water mark.
struct Budget {
  format::AtomicU64& total;
  uint64_t cap;
  format::AtomicU64& held;
  uint64_t& peak;
};

Budget DeviceBudget(File* file, int slot, int device, uint64_t keep_free) {
  DeviceRecord& r = file->devices[device];
  const uint64_t limit = Load(r.memory_limit);
  const uint64_t cap = (limit == 0 || limit > kMaxPlausibleBytes) ? kMaxPlausibleBytes
                       : limit > keep_free                         ? limit - keep_free
                                                                   : 0;
  return {r.used, cap, file->slots[slot].charged[device], r.peak};
}

Budget SpillBudget(File* file, int slot, int device) {
  DeviceRecord& r = file->devices[device];
  return {r.spilled, std::min(Load(r.host_limit), kMaxPlausibleBytes), file->slots[slot].spilled[device], r.spill_peak};
}

Admission Admit(Budget b, uint64_t bytes) {
  const uint64_t total = Load(b.total);
  if (total > b.cap || bytes > b.cap - total) return Admission::kRefused;
  Store(b.held, Load(b.held) + bytes);
  Store(b.total, total + bytes);
  b.peak = std::max(b.peak, total + bytes);
  return Admission::kAdmitted;
}

// Returns up to `bytes`; false when the slot held less.
bool GiveBack(Budget b, uint64_t bytes) {
  const uint64_t held = Load(b.held);
  const uint64_t take = std::min(bytes, held);
  Store(b.held, held - take);
  const uint64_t total = Load(b.total);
  Store(b.total, total >= take ? total - take : 0);
  return take == bytes;
}

}  // namespace

std::string FixedString(const char* bytes, size_t size) {
  return std::string(bytes, strnlen(bytes, size));
}

std::string ValidateContents(const File& file, bool check_totals) {
  if (std::string problem = CheckHeaderValues(file); !problem.empty()) return problem;
  if (std::string problem = CheckDevices(file, check_totals); !problem.empty()) return problem;
  return CheckSlots(file, check_totals);
}

void RepairAfterOwnerDeath(File* file) {
  format::Header& h = file->header;
  h.device_count = std::min<uint32_t>(h.device_count, kLedgerMaxDevices);
  h.slot_high_water = std::min<uint32_t>(h.slot_high_water, kLedgerMaxProcesses);
  for (int d = static_cast<int>(h.device_count); d < kLedgerMaxDevices; ++d) ClearDeviceRecord(&file->devices[d]);
  SlotSums sums;
  for (int s = 0; s < kLedgerMaxProcesses; ++s) {
    ProcessSlot& p = file->slots[s];
    if (!HoldsCharges(p) || s >= static_cast<int>(h.slot_high_water)) {
      ClearSlot(&p);  // a registration or an unregistration the dead owner did not finish
      continue;
    }
    for (int d = 0; d < kLedgerMaxDevices; ++d) {
      if (d >= static_cast<int>(h.device_count)) {
        Store(p.charged[d], 0);
        Store(p.overhead[d], 0);
        Store(p.spilled[d], 0);
      }
      sums.used[d] += static_cast<unsigned __int128>(Load(p.charged[d])) + Load(p.overhead[d]);
      sums.spilled[d] += Load(p.spilled[d]);
    }
  }
  const auto clamp = [](unsigned __int128 sum) {
    return sum > kMaxPlausibleBytes ? kMaxPlausibleBytes : static_cast<uint64_t>(sum);
  };
  for (uint32_t d = 0; d < h.device_count; ++d) {
    DeviceRecord& r = file->devices[d];
    const uint64_t used = clamp(sums.used[d]);
    Store(r.used, used);
    RaisePeak(&r, used);
    const uint64_t spilled = clamp(sums.spilled[d]);
    Store(r.spilled, spilled);
    r.spill_peak = std::max(r.spill_peak, spilled);
  }
  ++h.lock_recoveries;
  h.last_reclaim_ns = 0;  // the dead owner's own slot is due for reclaim now
}

void FreeSlot(File* file, int slot) {
  ProcessSlot& p = file->slots[slot];
  const uint32_t count = std::min<uint32_t>(file->header.device_count, kLedgerMaxDevices);  // not validated yet at boot reconcile
  for (uint32_t d = 0; d < count; ++d) {
    DeviceRecord& r = file->devices[d];
    const uint64_t held = Load(p.charged[d]) + Load(p.overhead[d]);
    const uint64_t used = Load(r.used);
    Store(r.used, used >= held ? used - held : 0);
    const uint64_t spilled_here = Load(p.spilled[d]);
    const uint64_t spilled = Load(r.spilled);
    Store(r.spilled, spilled >= spilled_here ? spilled - spilled_here : 0);
  }
  ClearSlot(&p);
}

bool HoldsCharges(const ProcessSlot& p) { return p.state == format::kSlotActive || p.state == format::kSlotDraining; }

bool AnyLiveSlot(const File& file) {
  const uint32_t high = std::min<uint32_t>(file.header.slot_high_water, static_cast<uint32_t>(kLedgerMaxProcesses));
  for (uint32_t s = 0; s < high; ++s) {
    if (file.slots[s].state == format::kSlotActive) return true;
  }
  return false;
}

namespace {

// Devices on which the slot holds device memory (charged or overhead), one bit each.
uint32_t DevicesHeld(const File& file, const ProcessSlot& p) {
  uint32_t held = 0;
  const uint32_t count = std::min<uint32_t>(file.header.device_count, kLedgerMaxDevices);
  for (uint32_t d = 0; d < count; ++d) {
    if ((Load(p.charged[d]) | Load(p.overhead[d])) != 0) held |= 1u << d;
  }
  return held;
}

void LowerHighWater(File* file) {
  format::Header& h = file->header;
  while (h.slot_high_water > 0 && file->slots[h.slot_high_water - 1].state == format::kSlotFree) --h.slot_high_water;
}

}  // namespace

int ReclaimDeadSlots(File* file, LivenessFn alive, uint64_t now_ns) {
  format::Header& h = file->header;
  int reclaimed = 0;
  for (int s = 0; s < static_cast<int>(h.slot_high_water); ++s) {
    ProcessSlot& p = file->slots[s];
    if (p.state == format::kSlotDraining) {
      // Nobody confirmed the driver let go: after the timeout, trust that it did.
      if (now_ns < p.drain_since_ns || now_ns - p.drain_since_ns >= static_cast<uint64_t>(kDrainTimeoutNs)) {
        FreeSlot(file, s);
        ++reclaimed;
      }
      continue;
    }
    if (p.state != format::kSlotActive || alive(p.pid, p.start_time)) continue;
    if (DevicesHeld(*file, p) == 0) {
      FreeSlot(file, s);
      ++reclaimed;
      continue;
    }
    // Spilled bytes are host memory: no device limit waits for the driver's teardown of them.
    const uint32_t count = std::min<uint32_t>(h.device_count, kLedgerMaxDevices);
    for (uint32_t d = 0; d < count; ++d) GiveBack(SpillBudget(file, s, static_cast<int>(d)), Load(p.spilled[d]));
    p.drain_since_ns = std::max<uint64_t>(now_ns, 1);
    p.drain_confirmed = 0;
    p.state = format::kSlotDraining;
  }
  LowerHighWater(file);
  h.reclaimed_processes += static_cast<uint64_t>(reclaimed);
  return reclaimed;
}

int ApplyDriverViewLocked(File* file, int device, const Ledger::DriverProcess* processes, int count,
                          uint64_t read_at_ns) {
  if (device < 0 || device >= static_cast<int>(file->header.device_count)) return 0;
  auto listed = [&](int32_t host_pid) -> const Ledger::DriverProcess* {
    for (int i = 0; i < count; ++i) {
      if (processes[i].host_pid == host_pid) return &processes[i];
    }
    return nullptr;
  };
  int freed = 0;
  for (int s = 0; s < static_cast<int>(file->header.slot_high_water); ++s) {
    ProcessSlot& p = file->slots[s];
    const Ledger::DriverProcess* seen = listed(p.host_pid);
    if (p.state == format::kSlotDraining) {
      // Only a reading taken after the process was found dead says it is gone from the driver.
      if (seen != nullptr || read_at_ns <= p.drain_since_ns) continue;
      p.drain_confirmed |= 1u << device;
      const uint32_t held = DevicesHeld(*file, p);
      if ((held & ~p.drain_confirmed) == 0) {
        FreeSlot(file, s);
        ++freed;
      }
    } else if (p.state == format::kSlotActive && seen != nullptr) {
      const uint64_t charged = Load(p.charged[device]);
      if (seen->bytes > charged + Load(p.overhead[device])) SetOverheadLocked(file, s, device, seen->bytes - charged);
    }
  }
  LowerHighWater(file);
  file->header.reclaimed_processes += static_cast<uint64_t>(freed);
  return freed;
}

bool ReclaimDue(const File& file, uint64_t now_ns) {
  const uint64_t last = file.header.last_reclaim_ns;
  return now_ns < last || now_ns - last >= static_cast<uint64_t>(kReclaimIntervalNs);
}

Admission ReserveLocked(File* file, int slot, int device, uint64_t bytes, uint64_t keep_free) {
  if (!ValidSlot(*file, slot) || !ValidDevice(*file, device)) return Admission::kInvalid;
  if (bytes == 0) return Admission::kAdmitted;
  return Admit(DeviceBudget(file, slot, device, keep_free), bytes);
}

bool ReleaseLocked(File* file, int slot, int device, uint64_t bytes) {
  if (!ValidSlot(*file, slot) || !ValidDevice(*file, device)) return false;
  return GiveBack(DeviceBudget(file, slot, device, 0), bytes);
}

Admission SpillLocked(File* file, int slot, int device, uint64_t bytes, uint64_t /*keep_free*/) {
  if (!ValidSlot(*file, slot) || !ValidDevice(*file, device)) return Admission::kInvalid;
  if (bytes == 0) return Admission::kAdmitted;
  return Admit(SpillBudget(file, slot, device), bytes);
}

bool ReleaseSpillLocked(File* file, int slot, int device, uint64_t bytes) {
  if (!ValidSlot(*file, slot) || !ValidDevice(*file, device)) return false;
  return GiveBack(SpillBudget(file, slot, device), bytes);
}

void SetOverheadLocked(File* file, int slot, int device, uint64_t bytes) {
  if (!ValidSlot(*file, slot) || !ValidDevice(*file, device)) return;
  bytes = std::min(bytes, kMaxPlausibleBytes / kLedgerMaxProcesses);  // keeps the sum plausible
  format::AtomicU64& overhead = file->slots[slot].overhead[device];
  DeviceRecord& r = file->devices[device];
  const uint64_t old = Load(overhead);
  const uint64_t used = Load(r.used);
  const uint64_t without = used >= old ? used - old : 0;
  const uint64_t now_used = std::min(without + bytes, kMaxPlausibleBytes);
  Store(overhead, bytes);
  Store(r.used, now_used);
  RaisePeak(&r, now_used);
}

int RegisterLocked(File* file, int32_t pid, int32_t host_pid, uint64_t start_time) {
  format::Header& h = file->header;
  int free_slot = -1;
  for (int s = 0; s < static_cast<int>(h.slot_high_water); ++s) {
    ProcessSlot& p = file->slots[s];
    if (p.state == format::kSlotActive && p.pid == pid) {
      if (p.start_time == start_time || p.start_time == 0 || start_time == 0) return s;
      FreeSlot(file, s);  // the pid was reused: its previous owner is dead
      ++h.reclaimed_processes;
    } else if (p.state == format::kSlotDraining && p.pid == pid) {
      FreeSlot(file, s);  // the pid was reused: its previous owner's memory has long gone
      ++h.reclaimed_processes;
    }
    if (p.state == format::kSlotFree && free_slot < 0) free_slot = s;
  }
  if (free_slot < 0) {
    if (h.slot_high_water >= static_cast<uint32_t>(kLedgerMaxProcesses)) return -1;
    free_slot = static_cast<int>(h.slot_high_water++);
  }
  ProcessSlot& p = file->slots[free_slot];
  ClearSlot(&p);
  p.pid = pid;
  p.host_pid = host_pid > 0 ? host_pid : pid;
  p.start_time = start_time;
  p.state = format::kSlotActive;  // last: a half-registered slot stays free
  return free_slot;
}

int BindDeviceLocked(File* file, int ordinal, const std::string& uuid, std::string* error) {
  format::Header& h = file->header;
  if (const int d = FindByUuid(*file, uuid); d >= 0) {
    if (file->devices[d].ordinal == -1 && FindByOrdinal(*file, ordinal) < 0) file->devices[d].ordinal = ordinal;
    return d;
  }
  if (const int d = FindByOrdinal(*file, ordinal); d >= 0) {
    DeviceRecord& r = file->devices[d];
    if (r.uuid[0] == '\0') {
      SetUuid(&r, uuid);
      return d;
    }
    *error = "CUDA ordinal " + std::to_string(ordinal) + " is bound to " + FixedString(r.uuid, sizeof(r.uuid)) +
             ", but this process sees " + uuid + " as ordinal " + std::to_string(ordinal) +
             " (a different CUDA_VISIBLE_DEVICES than the other processes sharing the ledger?)";
    return -1;
  }
  if (h.device_count >= static_cast<uint32_t>(kLedgerMaxDevices)) {
    *error = "all " + std::to_string(kLedgerMaxDevices) + " device records are in use; cannot add " + uuid;
    return -1;
  }
  const int d = static_cast<int>(h.device_count);
  InitDeviceRecord(&file->devices[d], ordinal, uuid);
  SetRecordLimits(&file->devices[d], h.default_memory_limit, h.default_sm_limit, h.default_sm_soft_limit,
                  h.default_host_limit);
  ++h.device_count;  // last: a half-written record beyond the count is cleared by a repair
  return d;
}

namespace {

// Record index for each entry of `limits` (existing, or device_count + k for new ones).
std::string PlanLimits(const File& file, const LimitSet& limits, int* target, int* new_count) {
  *new_count = static_cast<int>(file.header.device_count);
  for (size_t i = 0; i < limits.devices.size(); ++i) {
    const DeviceLimit& dl = limits.devices[i];
    int idx = FindByUuid(file, dl.uuid);
    if (idx < 0) idx = FindByOrdinal(file, dl.ordinal);
    if (idx >= 0) {
      const DeviceRecord& r = file.devices[idx];
      const std::string bound = FixedString(r.uuid, sizeof(r.uuid));
      if (!dl.uuid.empty() && !bound.empty() && bound != dl.uuid) {
        return "ordinal " + std::to_string(dl.ordinal) + " is bound to " + bound + " in the ledger, the limits say " + dl.uuid;
      }
      if (dl.ordinal >= 0 && r.ordinal >= 0 && r.ordinal != dl.ordinal) {
        return dl.uuid + " is ordinal " + std::to_string(r.ordinal) + " in the ledger, the limits say " + std::to_string(dl.ordinal);
      }
      if (dl.ordinal >= 0 && r.ordinal == -1 && FindByOrdinal(file, dl.ordinal) >= 0) {
        return "ordinal " + std::to_string(dl.ordinal) + " and " + dl.uuid + " are different devices in the ledger";
      }
    } else {
      if (*new_count >= kLedgerMaxDevices) return "more than " + std::to_string(kLedgerMaxDevices) + " devices";
      idx = (*new_count)++;
    }
    for (size_t j = 0; j < i; ++j) {
      if (target[j] == idx) return "two entries of the limits describe the same device (record " + std::to_string(idx) + ")";
    }
    target[i] = idx;
  }
  return "";
}

}  // namespace

std::string ApplyLimitsLocked(File* file, const LimitSet& limits) {
  int target[kLedgerMaxDevices] = {};
  int new_count = 0;
  if (limits.devices.size() > static_cast<size_t>(kLedgerMaxDevices)) return "more than 16 devices";
  if (std::string problem = PlanLimits(*file, limits, target, &new_count); !problem.empty()) return problem;
  format::Header& h = file->header;
  h.authority = static_cast<uint32_t>(limits.authority);
  h.default_memory_limit = limits.default_memory_limit;
  h.default_sm_limit = limits.default_sm_limit;
  h.default_sm_soft_limit = limits.default_sm_soft_limit;
  h.default_host_limit = limits.default_host_limit;
  Store(h.task_priority, static_cast<uint64_t>(limits.task_priority));
  for (uint32_t d = 0; d < h.device_count; ++d) {
    SetRecordLimits(&file->devices[d], limits.default_memory_limit, limits.default_sm_limit, limits.default_sm_soft_limit,
                    limits.default_host_limit);
  }
  for (size_t i = 0; i < limits.devices.size(); ++i) {
    const DeviceLimit& dl = limits.devices[i];
    DeviceRecord& r = file->devices[target[i]];
    if (target[i] >= static_cast<int>(h.device_count)) InitDeviceRecord(&r, dl.ordinal, dl.uuid);
    if (r.ordinal == -1) r.ordinal = dl.ordinal;
    if (r.uuid[0] == '\0' && !dl.uuid.empty()) SetUuid(&r, dl.uuid);
    SetRecordLimits(&r, dl.memory_limit, dl.sm_limit, dl.sm_soft_limit, dl.host_limit);
  }
  h.device_count = static_cast<uint32_t>(new_count);
  ++h.limits_generation;
  return "";
}

LimitSet LimitsOf(const File& file) {
  const format::Header& h = file.header;
  LimitSet limits;
  limits.authority = static_cast<Authority>(h.authority);
  limits.default_memory_limit = h.default_memory_limit;
  limits.default_sm_limit = h.default_sm_limit;
  limits.default_sm_soft_limit = h.default_sm_soft_limit;
  limits.default_host_limit = h.default_host_limit;
  limits.task_priority = static_cast<int>(Load(h.task_priority));
  for (uint32_t d = 0; d < std::min<uint32_t>(h.device_count, kLedgerMaxDevices); ++d) {
    const DeviceRecord& r = file.devices[d];
    limits.devices.push_back({r.ordinal, FixedString(r.uuid, sizeof(r.uuid)), Load(r.memory_limit),
                              static_cast<int>(Load(r.sm_limit)), static_cast<int>(Load(r.sm_soft_limit)),
                              Load(r.host_limit)});
  }
  return limits;
}

Snapshot SnapshotOf(const File& file, const std::string& path) {
  const format::Header& h = file.header;
  Snapshot snap;
  snap.path = path;
  snap.authority = static_cast<Authority>(h.authority);
  snap.task_priority = static_cast<int>(Load(h.task_priority));
  snap.default_memory_limit = h.default_memory_limit;
  snap.default_sm_limit = h.default_sm_limit;
  snap.default_sm_soft_limit = h.default_sm_soft_limit;
  snap.default_host_limit = h.default_host_limit;
  snap.created_unix_ns = h.created_unix_ns;
  snap.lock_recoveries = h.lock_recoveries;
  snap.reclaimed_processes = h.reclaimed_processes;
  const uint32_t count = std::min<uint32_t>(h.device_count, kLedgerMaxDevices);
  for (uint32_t d = 0; d < count; ++d) {
    const DeviceRecord& r = file.devices[d];
    DeviceUsage usage;
    usage.index = static_cast<int>(d);
    usage.ordinal = r.ordinal;
    usage.uuid = FixedString(r.uuid, sizeof(r.uuid));
    usage.memory_limit = Load(r.memory_limit);
    usage.sm_limit = static_cast<int>(Load(r.sm_limit));
    usage.sm_soft_limit = static_cast<int>(Load(r.sm_soft_limit));
    usage.used = Load(r.used);
    usage.peak = r.peak;
    usage.oom_refusals = r.oom_refusals;
    usage.context_bytes = Load(r.context_bytes);
    usage.host_limit = Load(r.host_limit);
    usage.spilled = Load(r.spilled);
    usage.spill_peak = r.spill_peak;
    usage.spill_refusals = r.spill_refusals;
    const compute::ComputeShareState& c = file.compute[d];
    usage.share_ppm = c.share_ewma_ppm.load(std::memory_order_relaxed);
    usage.busy_ns = c.busy_total_ns.load(std::memory_order_relaxed);
    usage.throttled_ns = c.throttled_total_ns.load(std::memory_order_relaxed);
    snap.devices.push_back(std::move(usage));
  }
  const int high_water = static_cast<int>(std::min<uint32_t>(h.slot_high_water, kLedgerMaxProcesses));
  for (int s = 0; s < high_water; ++s) {
    const ProcessSlot& p = file.slots[s];
    if (!HoldsCharges(p)) continue;
    ProcessUsage usage;
    usage.slot = s;
    usage.draining = p.state == format::kSlotDraining;
    usage.pid = p.pid;
    usage.host_pid = p.host_pid;
    usage.start_time = p.start_time;
    for (uint32_t d = 0; d < count; ++d) {
      usage.charged[d] = Load(p.charged[d]);
      usage.overhead[d] = Load(p.overhead[d]);
      usage.spilled[d] = Load(p.spilled[d]);
    }
    snap.processes.push_back(usage);
  }
  return snap;
}

}  // namespace vgpu::ledger::internal
