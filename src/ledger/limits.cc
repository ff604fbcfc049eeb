// Limit sets: validation and comparison (ledger.h), and conversion from the configuration
// (limits_from_config.h).
#include <set>

#include "common/config.h"
#include "ledger/ledger.h"
#include "ledger/ledger_format.h"
#include "ledger/limits_from_config.h"

namespace vgpu::ledger {
namespace {

struct Effective {
  uint64_t memory = 0;
  int sm = 0;
  int soft = 0;
  uint64_t host = 0;
};

Effective Defaults(const LimitSet& limits) {
  return {limits.default_memory_limit, limits.default_sm_limit, limits.default_sm_soft_limit,
          limits.default_host_limit};
}

Effective Of(const DeviceLimit& device) {
  return {device.memory_limit, device.sm_limit, device.sm_soft_limit, device.host_limit};
}

Effective ForOrdinal(const LimitSet& limits, int ordinal) {
  for (const DeviceLimit& device : limits.devices) {
    if (device.ordinal == ordinal) return Of(device);
  }
  return Defaults(limits);
}

Effective ForUuid(const LimitSet& limits, const std::string& uuid) {
  for (const DeviceLimit& device : limits.devices) {
    if (device.uuid == uuid) return Of(device);
  }
  return Defaults(limits);
}

std::string Memory(uint64_t bytes) { return bytes == 0 ? "unlimited" : FormatSize(bytes); }
std::string Percent(int percent, const char* zero) {
  return percent == 0 ? zero : std::to_string(percent) + "%";
}

void CompareEffective(const std::string& what, const Effective& a, const Effective& b, std::string* out) {
  auto add = [&](const std::string& item) { *out += (out->empty() ? "" : "; ") + what + " " + item; };
  if (a.memory != b.memory) add("memory limit " + Memory(a.memory) + " vs " + Memory(b.memory));
  if (a.sm != b.sm) add("compute limit " + Percent(a.sm, "unlimited") + " vs " + Percent(b.sm, "unlimited"));
  if (a.soft != b.soft) add("soft compute limit " + Percent(a.soft, "none") + " vs " + Percent(b.soft, "none"));
  const auto host = [](uint64_t bytes) { return bytes == 0 ? std::string("no spilling") : FormatSize(bytes); };
  if (a.host != b.host) add("host spill limit " + host(a.host) + " vs " + host(b.host));
}

std::string CheckDeviceLimit(const DeviceLimit& device) {
  if (device.ordinal < -1 || device.ordinal >= kLedgerMaxDevices) {
    return "ordinal " + std::to_string(device.ordinal) + " is out of range -1.." + std::to_string(kLedgerMaxDevices - 1);
  }
  if (device.uuid.size() >= format::kUuidBytes) return "uuid \"" + device.uuid + "\" is longer than 63 characters";
  for (const char c : device.uuid) {
    if (c <= ' ' || c > '~') return "uuid \"" + device.uuid + "\" holds a blank or non-ASCII character";
  }
  if (device.ordinal == -1 && device.uuid.empty()) return "a device needs an ordinal or a uuid";
  if (device.memory_limit > format::kMaxPlausibleBytes) return "memory limit above 2^63 bytes";
  if (device.host_limit > format::kMaxPlausibleBytes) return "host spill limit above 2^63 bytes";
  if (device.sm_limit < 0 || device.sm_limit > 100 || device.sm_soft_limit < 0 || device.sm_soft_limit > 100) {
    return "compute limits must be percentages 0..100";
  }
  return "";
}

}  // namespace

const char* AuthorityName(Authority authority) {
  switch (authority) {
    case Authority::kLibrary: return "library";
    case Authority::kVgpuRun: return "vgpu run";
    case Authority::kNodeDaemon: return "node daemon";
  }
  return "unknown";
}

std::string ValidateLimitSet(const LimitSet& limits) {
  if (static_cast<uint32_t>(limits.authority) > kMaxAuthority) return "unknown authority";
  if (limits.devices.size() > static_cast<size_t>(kLedgerMaxDevices)) {
    return std::to_string(limits.devices.size()) + " devices, more than " + std::to_string(kLedgerMaxDevices);
  }
  if (limits.default_memory_limit > format::kMaxPlausibleBytes) return "default memory limit above 2^63 bytes";
  if (limits.default_host_limit > format::kMaxPlausibleBytes) return "default host spill limit above 2^63 bytes";
  if (limits.default_sm_limit < 0 || limits.default_sm_limit > 100 || limits.default_sm_soft_limit < 0 ||
      limits.default_sm_soft_limit > 100) {
    return "default compute limits must be percentages 0..100";
  }
  if (limits.task_priority < 0 || limits.task_priority > kMaxTaskPriority) {
    return "task priority " + std::to_string(limits.task_priority) + " is out of range 0.." + std::to_string(kMaxTaskPriority);
  }
  std::set<int> ordinals;
  std::set<std::string> uuids;
  for (const DeviceLimit& device : limits.devices) {
    if (std::string problem = CheckDeviceLimit(device); !problem.empty()) return "device: " + problem;
    if (device.ordinal >= 0 && !ordinals.insert(device.ordinal).second) {
      return "ordinal " + std::to_string(device.ordinal) + " is listed twice";
    }
    if (!device.uuid.empty() && !uuids.insert(device.uuid).second) return "uuid " + device.uuid + " is listed twice";
  }
  return "";
}

std::string CompareLimits(const LimitSet& a, const LimitSet& b) {
  std::string out;
  std::set<int> ordinals;
  std::set<std::string> uuid_only;
  for (const LimitSet* limits : {&a, &b}) {
    for (const DeviceLimit& device : limits->devices) {
      if (device.ordinal >= 0) {
        ordinals.insert(device.ordinal);
      } else {
        uuid_only.insert(device.uuid);
      }
    }
  }
  for (const int ordinal : ordinals) {
    CompareEffective("device " + std::to_string(ordinal), ForOrdinal(a, ordinal), ForOrdinal(b, ordinal), &out);
  }
  for (const std::string& uuid : uuid_only) CompareEffective(uuid, ForUuid(a, uuid), ForUuid(b, uuid), &out);
  CompareEffective("other devices:", Defaults(a), Defaults(b), &out);
  if (a.task_priority != b.task_priority) {
    out += (out.empty() ? "" : "; ") + std::string("task priority ") + std::to_string(a.task_priority) + " vs " +
           std::to_string(b.task_priority);
  }
  return out;
}

LimitSet LimitSetFromConfig(const Config& config, Authority authority) {
  LimitSet limits;
  limits.authority = authority;
  limits.task_priority = config.task_priority;
  if (config.disable_control) return limits;
  limits.default_memory_limit = config.memory_limit_all;
  limits.default_sm_limit = config.sm_limit_all >= 100 ? 0 : config.sm_limit_all;
  limits.default_sm_soft_limit = config.sm_soft_limit;
  limits.default_host_limit = config.HostSpillLimitAll();
  for (int i = 0; i < kLedgerMaxDevices && i < kMaxDevices; ++i) {
    const bool has_uuid = static_cast<size_t>(i) < config.device_uuids.size();
    const bool listed = config.memory_limit_device[i] != 0 || config.sm_limit_device[i] != 0 ||
                        config.sm_soft_limit_device[i] != 0 || has_uuid;
    if (!listed) continue;
    limits.devices.push_back({i, has_uuid ? config.device_uuids[i] : std::string(), config.MemoryLimit(i),
                              config.SmLimit(i), config.SmSoftLimit(i), config.HostSpillLimit(i)});
  }
  return limits;
}

}  // namespace vgpu::ledger
