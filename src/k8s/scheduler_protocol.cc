#include "k8s/scheduler_protocol.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace vgpu::k8s {

const SchedulerProtocol kHamiProtocol = {
    "hami",
    "hami.io/node-nvidia-register",
    "hami.io/node-handshake",
    "hami.io/mutex.lock",
    /*lock_names_pod=*/true,
    "hami.io/vgpu-devices-to-allocate",
    "hami.io/vgpu-node",
    "hami.io/bind-phase",
    EntrySeparator::kTerminated,
    /*init_containers_first=*/true,
};

const SchedulerProtocol kVolcanoProtocol = {
    "volcano",
    "volcano.sh/node-vgpu-register",
    "volcano.sh/node-vgpu-handshake",
    "hamivgpu",
    /*lock_names_pod=*/false,
    "volcano.sh/devices-to-allocate",
    "volcano.sh/vgpu-node",
    "volcano.sh/bind-phase",
    EntrySeparator::kJoined,
    /*init_containers_first=*/false,
};

std::string EncodeHamiNodeRegister(const std::vector<NodeGpuRecord>& gpus) {
  // ordered_json keeps the insertion order, which is the order of HAMi's Go struct fields.
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const NodeGpuRecord& gpu : gpus) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    if (!gpu.uuid.empty()) entry["id"] = gpu.uuid;
    if (gpu.index != 0) entry["index"] = gpu.index;
    if (gpu.count != 0) entry["count"] = gpu.count;
    if (gpu.memory != 0) entry["devmem"] = gpu.memory;
    if (gpu.cores != 0) entry["devcore"] = gpu.cores;
    if (!gpu.type.empty()) entry["type"] = gpu.type;
    if (gpu.numa != 0) entry["numa"] = gpu.numa;
    if (!gpu.mode.empty()) entry["mode"] = gpu.mode;
    if (gpu.healthy) entry["health"] = true;
    list.push_back(std::move(entry));
  }
  return list.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string EncodeVolcanoNodeRegister(const std::vector<NodeGpuRecord>& gpus) {
  std::string text;
  for (const NodeGpuRecord& gpu : gpus) {
    text += gpu.uuid + "," + std::to_string(gpu.count) + "," + std::to_string(gpu.memory) + "," + gpu.type +
            "," + (gpu.healthy ? "true" : "false") + "," + gpu.mode + ":";
  }
  return text;
}

std::string HandshakeReported(const struct timespec& now) {
  struct tm utc {};
  gmtime_r(&now.tv_sec, &utc);
  char date[64];
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &utc);
  char text[128];
  snprintf(text, sizeof(text), "Reported %s.%09ld +0000 UTC", date, static_cast<long>(now.tv_nsec));
  return text;
}

bool HandshakeWantsReport(const std::string& value) {
  return value.rfind("Reported", 0) != 0;
}

namespace {

// RFC3339 as Go writes it with time.RFC3339: "2006-01-02T15:04:05Z" or "...+08:00" (an optional
// fraction is accepted too).
bool LooksLikeRfc3339(const std::string& text) {
  auto digits = [&](size_t at, size_t n) {
    if (at + n > text.size()) return false;
    for (size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
    }
    return true;
  };
  if (!(digits(0, 4) && text.size() > 19 && text[4] == '-' && digits(5, 2) && text[7] == '-' && digits(8, 2) &&
        (text[10] == 'T' || text[10] == 't') && digits(11, 2) && text[13] == ':' && digits(14, 2) &&
        text[16] == ':' && digits(17, 2))) {
    return false;
  }
  size_t at = 19;
  if (at < text.size() && text[at] == '.') {
    ++at;
    size_t start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == start) return false;
  }
  if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) return at + 1 == text.size();
  return at + 6 == text.size() && (text[at] == '+' || text[at] == '-') && digits(at + 1, 2) && text[at + 3] == ':' &&
         digits(at + 4, 2);
}

}  // namespace

Status ParseNodeLock(const SchedulerProtocol& protocol, const std::string& value, NodeLockValue* out) {
  const std::string what = std::string(protocol.lock_annotation) + "=\"" + value + "\"";
  NodeLockValue lock;
  if (protocol.lock_names_pod) {
    size_t first = value.find(',');
    size_t second = first == std::string::npos ? first : value.find(',', first + 1);
    if (second == std::string::npos || value.find(',', second + 1) != std::string::npos) {
      return Status::Error(what + " is not \"<RFC3339 time>,<namespace>,<pod>\"");
    }
    lock.time = value.substr(0, first);
    lock.pod_namespace = value.substr(first + 1, second - first - 1);
    lock.pod_name = value.substr(second + 1);
    if (lock.pod_namespace.empty() || lock.pod_name.empty()) {
      return Status::Error(what + " names no pod (empty namespace or name)");
    }
  } else {
    lock.time = value;
  }
  if (!LooksLikeRfc3339(lock.time)) return Status::Error(what + ": \"" + lock.time + "\" is not an RFC3339 time");
  *out = std::move(lock);
  return Status::Ok();
}

}  // namespace vgpu::k8s
