#include "k8s/container_grant.h"

#include "common/config.h"
#include "k8s/deviceplugin.pb.h"
#include "ledger/limits_from_config.h"

namespace vgpu::k8s {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::string MemoryValue(uint64_t bytes) {
  return bytes % kMiB == 0 ? std::to_string(bytes / kMiB) + "m" : std::to_string(bytes);
}

void AddMount(v1beta1::ContainerAllocateResponse* response, const std::string& container_path,
              const std::string& host_path, bool read_only) {
  v1beta1::Mount* mount = response->add_mounts();
  mount->set_container_path(container_path);
  mount->set_host_path(host_path);
  mount->set_read_only(read_only);
}

}  // namespace

std::string ContainerKey(const std::string& pod_uid, const std::string& container_name) {
  return pod_uid + "_" + container_name;
}

Status ValidateContainerKey(const std::string& key) {
  if (key.empty() || key == "." || key == ".." || key.size() > 200) {
    return Status::Error("container directory name \"" + key + "\" is empty, '.', '..' or too long");
  }
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return Status::Error("container directory name \"" + key + "\" holds a character other than [A-Za-z0-9._-]");
  }
  return Status::Ok();
}

std::map<std::string, std::string> GrantEnvironment(const ContainerGrant& grant) {
  std::map<std::string, std::string> env;
  std::string visible;
  for (size_t i = 0; i < grant.gpus.size(); ++i) {
    const GrantedGpu& gpu = grant.gpus[i];
    visible += (i == 0 ? "" : ",") + gpu.uuid;
    if (gpu.memory_bytes != 0) env["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = MemoryValue(gpu.memory_bytes);
    if (gpu.sm_limit > 0 && gpu.sm_limit < 100) env["CUDA_DEVICE_SM_LIMIT_" + std::to_string(i)] = std::to_string(gpu.sm_limit);
  }
  env["NVIDIA_VISIBLE_DEVICES"] = visible;
  env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = kContainerLedgerPath;
  if (grant.register_with_daemon) env["VGPU_SOCKET"] = kContainerSocketPath;
  env["VGPU_BOARD"] = kContainerBoardPath;
  if (grant.task_priority >= 0) env["CUDA_TASK_PRIORITY"] = std::to_string(grant.task_priority);
  if (!grant.pod_uid.empty()) env["VGPU_POD_UID"] = grant.pod_uid;
  if (!grant.container_name.empty()) env["VGPU_CONTAINER_NAME"] = grant.container_name;
  return env;
}

Status GrantLimits(const ContainerGrant& grant, ledger::LimitSet* limits) {
  if (grant.gpus.size() > static_cast<size_t>(kMaxDevices)) {
    return Status::Error(std::to_string(grant.gpus.size()) + " GPUs granted to one container, at most " +
                         std::to_string(kMaxDevices) + " are supported");
  }
  const std::map<std::string, std::string> env = GrantEnvironment(grant);
  ConfigResult parsed = ParseConfig([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  if (!parsed.ok()) return Status::Error("the container's limit variables are invalid: " + parsed.errors.front().Message());
  *limits = ledger::LimitSetFromConfig(parsed.config, ledger::Authority::kNodeDaemon);
  if (std::string problem = ledger::ValidateLimitSet(*limits); !problem.empty()) {
    return Status::Error("the container's limits are invalid: " + problem);
  }
  return Status::Ok();
}

void BuildContainerResponse(const ContainerGrant& grant, const NodePaths& paths,
                            v1beta1::ContainerAllocateResponse* response) {
  for (const auto& [name, value] : GrantEnvironment(grant)) (*response->mutable_envs())[name] = value;
  AddMount(response, kContainerLibraryPath, paths.library, /*read_only=*/true);
  if (!grant.skip_preload) AddMount(response, kContainerPreloadPath, paths.preload_file, /*read_only=*/true);
  AddMount(response, kContainerStateDir, paths.ContainerDir(grant.key), /*read_only=*/false);
  if (grant.register_with_daemon) AddMount(response, kContainerSocketPath, paths.Socket(), /*read_only=*/false);
  AddMount(response, kContainerBoardPath, paths.Board(), /*read_only=*/false);
}

}  // namespace vgpu::k8s
