// Device-memory accounting of this process against its container's ledger.
//
// Enabled when a memory or compute limit is configured or a ledger path is given (otherwise every
// memory hook is a plain forwarder). Initialised by cuInit (InitForCuInit): opening the ledger can
// fail, and then cuInit is refused, so a job never runs unlimited because its ledger is broken.
//
// Devices: the CUDA ordinal of the current context is mapped to a ledger device by the GPU's
// UUID (the ledger keys devices by UUID; GPU_DEVICES_UUID, when set, says which limit index
// each UUID has). Admission is reserve-then-allocate (ledger.h); a refused reservation first
// reconciles this process's overhead with NVML and reclaims dead processes, then retries once.
//
// Thread safety: all functions may be called from any thread after InitForCuInit returned.
#pragma once

#include <cstdint>
#include <string>

namespace vgpu::ledger {
class Ledger;
}  // namespace vgpu::ledger

namespace vgpu::memory {

// Opens the ledger and registers this process. Returns false with *error set when memory
// limits are configured but cannot be enforced (corrupt ledger, full process table).
bool InitForCuInit(std::string* error);

// Whether allocations are accounted (a relaxed load; the hot-path check).
bool Enabled();

// The container's ledger once InitForCuInit opened it (it also holds the compute limiter's shared
// state, so a compute limit opens it too), else nullptr. Valid for the life of the process.
ledger::Ledger* SharedLedger();

// Ledger device of the calling thread's current context, or -1 (no context, unknown device).
// On -1 the caller forwards the call: the driver refuses it the same way.
int CurrentDevice();
// Ledger device for a CUDA ordinal, or -1.
int DeviceForOrdinal(int ordinal);

// Charges `bytes` on `device`; false = over the limit less the headroom (a refusal was counted,
// and logged at info level when `log_refusal`; a caller that spills instead logs what it does).
bool Reserve(int device, uint64_t bytes, bool log_refusal = true);
// Reserve for bytes the driver takes only during the call that follows (an allocation, a context,
// a graph's instantiation), so NVML cannot see them yet: they are also marked in flight
// (NoteInflight), at the moment they are charged. Charged first and marked after, a
// reconciliation on another thread could read them in between (charged, not in flight, not in
// NVML's figure), take them for overhead that went away and lower this process's overhead by
// them, letting the container pass its limit by as much once the driver took them: a window of
// a few instructions for an allocation, the whole instantiation for a graph. The caller calls
// NoteInflight(device, -bytes) once the driver call returned, and also Release(device, bytes)
// when it failed.
bool ReserveUnseen(int device, uint64_t bytes, bool log_refusal = true);
// Charges memory the driver has already added beyond what was asked (a pool that grew past its
// block): up to the limit itself, into the headroom, which exists for such memory. false when
// even the limit cannot hold it.
bool ReserveIntoHeadroom(int device, uint64_t bytes);

// What an allocation of `bytes` really takes on `device`, which is what it is charged. Above
// half the allocation granularity the driver rounds up to the granularity (2 MiB on an H200:
// 1.5 MiB takes 2, 2 MiB + 1 byte takes 4); smaller ones share pages (charged in 512-byte units;
// a partly used page appears as overhead at the next reconciliation).
uint64_t ChargeSize(int device, uint64_t bytes);

// Room the limit keeps free on `device` for memory the driver adds without an allocation call
// (VGPU_MEMORY_HEADROOM; 0 without a limit). Admission refuses what would eat into it, and the
// free figure leaves it out, so what the application is told is free can be allocated.
uint64_t Headroom(int device);
// limit - used - headroom (0 when that is negative); for a device without a limit, 0.
uint64_t Available(int device);

// Contexts are charged before they exist: creating one adds its memory at once (518 MiB for a
// runtime context on an H200, driver 580, the first and every further one), without an
// allocation call, so the size learned from earlier contexts of the container (ledger
// ContextBytes) is reserved first.
struct ContextCharge {
  int device = -1;           // ledger device; -1: not accounted (no limit, unknown device)
  uint64_t reserved = 0;     // bytes reserved for the context
  uint64_t overhead_before = 0;
};
// Before creating a context on CUDA ordinal `ordinal`. false: it does not fit (refuse the
// creation with CUDA_ERROR_OUT_OF_MEMORY). `new_memory`: false when the call cannot create
// memory (the primary context is already active), then nothing is reserved.
bool ReserveContext(int ordinal, bool new_memory, ContextCharge* charge);
// After the creation call (`created`: it succeeded): measures the context with NVML, learns its
// size for the container, and gives the reservation back. Returns false when the container is
// now over its limit: the caller destroys the context and refuses it.
bool FinishContext(const ContextCharge& charge, bool created);
void Release(int device, uint64_t bytes);

// The host budget of oversubscription (memory_spill.h): the ledger's host limit of `device`
// (0 = it does not spill), and charging / returning spilled bytes against it. ReserveHost does
// not log; false = the host limit is reached (a spill refusal was counted).
uint64_t HostLimit(int device);
uint64_t Spilled(int device);
bool ReserveHost(int device, uint64_t bytes);
void ReleaseHost(int device, uint64_t bytes);

// Bytes this process has charged on `device` that NVML cannot see yet (reserved while the driver
// call has not returned, or being freed), so reconciliation does not mistake them for missing
// overhead.
void NoteInflight(int device, int64_t delta);
// Graph memory charged at instantiation; NVML sees it once the driver has reserved it for the
// device's graphs (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), which reconciliation asks.
void NoteGraphCharge(int device, int64_t delta);

// Refreshes this process's context/module overhead on `device` from NVML per-process usage:
// overhead = NVML usage − charges NVML can see, taking the smaller of that figure read before and
// after the NVML query, so a concurrent allocation or free can only make it larger (never let
// the total fall below what the driver really holds).
// `after_context`: called right after a context was created on the device; the overhead found
// then is kept as a floor, because later NVML figures can fall short of what is charged when the
// driver has not made memory resident (managed memory, untouched), which would otherwise hide
// the context.
// Returns false when NVML could not be read (nothing changed).
bool Reconcile(int device, bool after_context = false);
// Reconciles when the last reconciliation on `device` is older than the interval.
void MaybeReconcile(int device);
// Reconciliation reads NVML's list of every process on the GPU; the ledger takes from it what
// other processes of the container hold beyond their charges and which dead ones the driver has
// let go (Ledger::ApplyDriverView). A process without a context on `device` (nvidia-smi) does
// only that part.
void RefreshFromDriver(int device);

// Limit (0 = unlimited) and container-wide usage of a ledger device.
uint64_t Limit(int device);
uint64_t Used(int device);

// The ledger device whose GPU has this UUID ("GPU-…"), binding CUDA ordinals if needed; -1.
int DeviceForUuid(const std::string& uuid);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for a CUDA device; empty on failure.
std::string UuidOfOrdinal(int ordinal);

}  // namespace vgpu::memory
