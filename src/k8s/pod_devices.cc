#include "k8s/pod_devices.h"

#include <charconv>
#include <string_view>

namespace vgpu::k8s {
namespace {

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

bool ParseInteger(std::string_view text, int64_t max, int64_t* out) {
  if (text.empty() || text.size() > 19) return false;
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > max) return false;
  *out = value;
  return true;
}

bool PrintableToken(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

Status DecodeDevice(std::string_view text, ContainerDevice* device) {
  std::vector<std::string_view> fields = Split(text, ',');
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (fields.size() != 4) {
    return Status::Error("device " + quoted + " has " + std::to_string(fields.size()) +
                         " fields, expected UUID,TYPE,MEMORY,CORES");
  }
  if (!PrintableToken(fields[0])) return Status::Error("device " + quoted + " has an empty or malformed UUID");
  if (!PrintableToken(fields[1])) return Status::Error("device " + quoted + " has an empty or malformed type");
  int64_t memory = 0;
  int64_t cores = 0;
  if (!ParseInteger(fields[2], INT32_MAX, &memory)) {
    return Status::Error("device " + quoted + ": memory \"" + std::string(fields[2]) +
                         "\" is not a whole number 0.." + std::to_string(INT32_MAX));
  }
  if (!ParseInteger(fields[3], 100, &cores)) {
    return Status::Error("device " + quoted + ": cores \"" + std::string(fields[3]) +
                         "\" is not a percentage 0..100");
  }
  device->uuid = std::string(fields[0]);
  device->type = std::string(fields[1]);
  device->memory = memory;
  device->cores = static_cast<int>(cores);
  return Status::Ok();
}

Status DecodeEntry(std::string_view text, ContainerDevices* devices) {
  // "A,T,M,C:B,T,M,C:" — every device ends in ':'; a missing final ':' is tolerated.
  std::vector<std::string_view> parts = Split(text, ':');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) {
      if (i + 1 == parts.size()) break;  // the terminator of the last device
      return Status::Error("empty device between ':' separators");
    }
    ContainerDevice device;
    if (Status status = DecodeDevice(parts[i], &device); !status.ok) return status;
    devices->push_back(std::move(device));
  }
  return Status::Ok();
}

}  // namespace

Status DecodePodDevices(const std::string& text, EntrySeparator separator,
                        std::vector<ContainerDevices>* out) {
  out->clear();
  if (text.empty()) return Status::Ok();
  std::string_view body = text;
  if (separator == EntrySeparator::kTerminated && body.back() == ';') body.remove_suffix(1);
  std::vector<std::string_view> entries = Split(body, ';');
  for (size_t i = 0; i < entries.size(); ++i) {
    ContainerDevices devices;
    if (Status status = DecodeEntry(entries[i], &devices); !status.ok) {
      out->clear();
      return status.Context("container entry " + std::to_string(i));
    }
    out->push_back(std::move(devices));
  }
  return Status::Ok();
}

std::string EncodePodDevices(const std::vector<ContainerDevices>& pod, EntrySeparator separator) {
  std::string text;
  for (size_t i = 0; i < pod.size(); ++i) {
    if (separator == EntrySeparator::kJoined && i > 0) text += ';';
    for (const ContainerDevice& device : pod[i]) {
      text += device.uuid + "," + device.type + "," + std::to_string(device.memory) + "," +
              std::to_string(device.cores) + ":";
    }
    if (separator == EntrySeparator::kTerminated) text += ';';
  }
  return text;
}

int NextEntryWithType(const std::vector<ContainerDevices>& pod, const std::string& type) {
  for (size_t i = 0; i < pod.size(); ++i) {
    for (const ContainerDevice& device : pod[i]) {
      if (device.type == type) return static_cast<int>(i);
    }
  }
  return -1;
}

bool AnyDeviceOfType(const std::vector<ContainerDevices>& pod, const std::string& type) {
  return NextEntryWithType(pod, type) >= 0;
}

}  // namespace vgpu::k8s
