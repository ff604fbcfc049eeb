// What vgpu-node writes for, and reads from, the two supported scheduler protocols:
// HAMi's scheduler extender (2.8+) and Volcano's deviceshare plugin (hamivgpu). Pure functions
// and constants only; the Allocate flow that uses them is in scheduler_allocator.h.
//
// Node registration (written by the node, read by the scheduler):
//   HAMi     hami.io/node-nvidia-register = JSON array of
//            {"id","index","count","devmem","devcore","type","numa","mode","health"} in that
//            order, zero/empty/false fields omitted (Go's encoding/json "omitempty"), e.g.
//            [{"id":"GPU-a","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-H100",
//              "mode":"hami-core","health":true}]
//            hami.io/node-handshake = "Reported <time>"
//   Volcano  volcano.sh/node-vgpu-register = per GPU "<uuid>,<count>,<devmem>,<type>,<health>,<mode>:"
//            volcano.sh/node-vgpu-handshake = "Reported <time>"
// Node lock (written by the scheduler, released by the node after Allocate):
//   HAMi     hami.io/mutex.lock = "<RFC3339 time>,<namespace>,<pod name>"
//   Volcano  hamivgpu = "<RFC3339 time>" (names no pod)
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "k8s/pod_devices.h"
#include "k8s/status.h"

namespace vgpu::k8s {

// One scheduler protocol's names. The two instances below are the only ones.
struct SchedulerProtocol {
  const char* name;                  // "hami" / "volcano", for messages
  const char* register_annotation;   // node: device list
  const char* handshake_annotation;  // node: "Reported <time>"
  const char* lock_annotation;       // node: the scheduler's node lock
  bool lock_names_pod;               // HAMi: "<time>,<ns>,<pod>"; Volcano: "<time>"
  const char* devices_to_allocate;   // pod: what is still to be handed out (popped per container)
  const char* assigned_node;         // pod: the node the scheduler chose
  const char* bind_phase;            // pod: "allocating" -> "success" | "failed"
  EntrySeparator separator;          // pod device list dialect
  bool init_containers_first;        // entry order: init containers, then containers (HAMi)
};

extern const SchedulerProtocol kHamiProtocol;
extern const SchedulerProtocol kVolcanoProtocol;

inline constexpr char kBindPhaseAllocating[] = "allocating";
inline constexpr char kBindPhaseSuccess[] = "success";
inline constexpr char kBindPhaseFailed[] = "failed";
inline constexpr char kNvidiaDeviceType[] = "NVIDIA";
inline constexpr char kHamiCoreMode[] = "hami-core";

// One GPU as a scheduler sees it.
struct NodeGpuRecord {
  std::string uuid;
  int index = 0;         // NVML index on the node
  int count = 0;         // how many containers may share it (split count)
  int64_t memory = 0;    // MiB (HAMi, after scaling) or memory-factor units (Volcano)
  int cores = 0;         // 100 = one whole GPU (HAMi only)
  std::string type;      // "NVIDIA-<product name>"
  int numa = 0;
  std::string mode;      // "hami-core"
  bool healthy = false;
};

std::string EncodeHamiNodeRegister(const std::vector<NodeGpuRecord>& gpus);
std::string EncodeVolcanoNodeRegister(const std::vector<NodeGpuRecord>& gpus);

// "Reported <time>" with the time as Go's time.String() prints it, in UTC:
// "Reported 2026-11-21 09:30:05.123456789 +0000 UTC". The schedulers only check that the value
// starts neither with "Requesting" nor with "Deleted".
std::string HandshakeReported(const struct timespec& now);
// Whether the scheduler asks the node to report again (value starts with "Requesting_" or
// "Deleted_", or is not a report at all).
bool HandshakeWantsReport(const std::string& value);

struct NodeLockValue {
  std::string time;       // RFC3339 as written
  std::string pod_namespace;  // empty for Volcano
  std::string pod_name;       // empty for Volcano
};

// Parses a lock value for `protocol`. Errors name the value and what is wrong: not three
// comma-separated fields (HAMi), an empty namespace or name, a time that is not RFC3339.
Status ParseNodeLock(const SchedulerProtocol& protocol, const std::string& value, NodeLockValue* out);

}  // namespace vgpu::k8s
