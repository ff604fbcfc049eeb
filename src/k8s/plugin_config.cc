#include "k8s/plugin_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>

namespace vgpu::k8s {
namespace {

Status ParseInt(const std::string& key, const std::string& value, int min, int max, int* out) {
  int parsed = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (value.empty() || error != std::errc() || end != value.data() + value.size() || parsed < min || parsed > max) {
    return Status::Error(key + "=\"" + value + "\": expected a whole number " + std::to_string(min) + ".." +
                         std::to_string(max));
  }
  *out = parsed;
  return Status::Ok();
}

Status ParseResourceName(const std::string& key, const std::string& value, std::string* out) {
  const size_t slash = value.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < value.size() && value.find('/', slash + 1) == std::string::npos;
  for (char c : value) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
          c == '_' || c == '/')) {
      ok = false;
    }
  }
  if (!ok) return Status::Error(key + "=\"" + value + "\": expected an extended resource name such as vendor.com/name");
  *out = value;
  return Status::Ok();
}

Status ParsePath(const std::string& key, const std::string& value, std::string* out) {
  if (value.empty() || value[0] != '/') return Status::Error(key + "=\"" + value + "\": expected an absolute path");
  std::string path = value;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  *out = path;
  return Status::Ok();
}

}  // namespace

const char* PluginModeName(PluginMode mode) {
  switch (mode) {
    case PluginMode::kOff: return "off";
    case PluginMode::kHami: return "hami";
    case PluginMode::kVolcano: return "volcano";
    case PluginMode::kStandalone: return "standalone";
  }
  return "unknown";
}

Status ApplyPluginSetting(const std::string& key, const std::string& value, PluginConfig* config) {
  if (key == "mode") {
    static const std::map<std::string, PluginMode> kModes = {{"off", PluginMode::kOff},
                                                             {"hami", PluginMode::kHami},
                                                             {"volcano", PluginMode::kVolcano},
                                                             {"standalone", PluginMode::kStandalone}};
    auto it = kModes.find(value);
    if (it == kModes.end()) return Status::Error("mode=\"" + value + "\": expected off, hami, volcano or standalone");
    config->mode = it->second;
    return Status::Ok();
  }
  if (key == "node_name") {
    if (value.empty()) return Status::Error("node_name is empty");
    config->node_name = value;
    return Status::Ok();
  }
  if (key == "device_plugin_dir") return ParsePath(key, value, &config->device_plugin_dir);
  if (key == "state_dir") return ParsePath(key, value, &config->paths.state_dir);
  if (key == "library_path") return ParsePath(key, value, &config->paths.library);
  if (key == "preload_path") return ParsePath(key, value, &config->paths.preload_file);
  if (key == "split_count") return ParseInt(key, value, 1, 1000, &config->split_count);
  if (key == "memory_scaling") {
    char* end = nullptr;
    const double scaling = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(scaling) || scaling < 1.0 || scaling > 100.0) {
      return Status::Error("memory_scaling=\"" + value + "\": expected a number 1..100");
    }
    config->memory_scaling = scaling;
    return Status::Ok();
  }
  if (key == "register_interval_s") return ParseInt(key, value, 1, 3600, &config->register_interval_s);
  if (key == "update_attempts") return ParseInt(key, value, 1, 100, &config->update_attempts);
  if (key == "hami_resource") return ParseResourceName(key, value, &config->hami_resource);
  if (key == "volcano_number_resource") return ParseResourceName(key, value, &config->volcano_number_resource);
  if (key == "volcano_memory_resource") return ParseResourceName(key, value, &config->volcano_memory_resource);
  if (key == "volcano_cores_resource") return ParseResourceName(key, value, &config->volcano_cores_resource);
  if (key == "volcano_memory_factor") return ParseInt(key, value, 1, 1 << 20, &config->volcano_memory_factor);
  if (key == "standalone_preset") {
    if (value == "alnair") {
      config->standalone_memory_resource = "alnair/vgpu-memory";
      config->standalone_compute_resource = "alnair/vgpu-compute";
    } else if (value == "vgpu") {
      config->standalone_memory_resource = "vgpu.io/memory";
      config->standalone_compute_resource = "vgpu.io/compute";
    } else {
      return Status::Error("standalone_preset=\"" + value + "\": expected alnair or vgpu");
    }
    return Status::Ok();
  }
  if (key == "standalone_memory_resource") return ParseResourceName(key, value, &config->standalone_memory_resource);
  if (key == "standalone_compute_resource") return ParseResourceName(key, value, &config->standalone_compute_resource);
  if (key == "pairing_window_ms") return ParseInt(key, value, 1, 60000, &config->pairing_window_ms);
  if (key == "pod_resources_socket") return ParsePath(key, value, &config->pod_resources_socket);
  if (key == "api_server") {
    if (value.rfind("https://", 0) != 0) return Status::Error("api_server=\"" + value + "\": expected an https:// URL");
    config->api.server = value;
    while (config->api.server.back() == '/') config->api.server.pop_back();
    return Status::Ok();
  }
  if (key == "api_ca_file") return ParsePath(key, value, &config->api.ca_file);
  if (key == "api_token_file") return ParsePath(key, value, &config->api.token_file);
  if (key == "api_token_refresh_s") return ParseInt(key, value, 1, 86400, &config->api.token_refresh_seconds);
  if (key == "api_timeout_ms") return ParseInt(key, value, 100, 600000, &config->api.timeout_ms);
  return Status::Error("unknown Kubernetes setting \"" + key + "\"");
}

Status FinishPluginConfig(const std::function<const char*(const char*)>& getenv, PluginConfig* config) {
  if (config->mode == PluginMode::kOff) return Status::Ok();
  if (config->node_name.empty()) {
    const char* node = getenv("NODE_NAME");
    if (node == nullptr || *node == '\0') {
      return Status::Error("the node name is unknown: set node_name or the NODE_NAME environment variable "
                           "(spec.nodeName through the downward API)");
    }
    config->node_name = node;
  }
  const bool needs_api = config->mode == PluginMode::kHami || config->mode == PluginMode::kVolcano;
  if (needs_api && config->api.server.empty()) {
    if (Status status = InClusterOptions(getenv, &config->api); !status.ok) {
      return status.Context(std::string("mode ") + PluginModeName(config->mode) + " needs the Kubernetes API");
    }
  }
  if (config->mode == PluginMode::kStandalone &&
      config->standalone_memory_resource == config->standalone_compute_resource) {
    return Status::Error("standalone_memory_resource and standalone_compute_resource are both \"" +
                         config->standalone_memory_resource + "\"");
  }
  return Status::Ok();
}

}  // namespace vgpu::k8s
