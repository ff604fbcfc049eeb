// vgpu-k8s-test-node: hosts the Kubernetes module (src/k8s) the way vgpu-node does, with a GPU
// list read from a file instead of NVML, for the integration tests on machines without GPUs.
//
//   vgpu-k8s-test-node --gpus=FILE [--log-level=0..5] [--<setting>=<value>]...
//
// Settings are the Kubernetes keys of docs/kubernetes.md (mode, node_name, device_plugin_dir,
// state_dir, api_server, ...). FILE holds {"gpus": [{"uuid", "index", "memory_mib", "name",
// "numa", "healthy"}]} and is re-read whenever it changes, so tests flip GPU health by
// rewriting it. SIGTERM / SIGINT stop the plugin cleanly (exit 0).
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "k8s/json_util.h"
#include "k8s/k8s_plugin.h"

namespace {

using vgpu::k8s::GpuInfo;
using vgpu::k8s::Json;

bool ReadGpus(const std::string& path, std::string* text, std::vector<GpuInfo>* gpus, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    *error = "cannot read " + path;
    return false;
  }
  std::ostringstream content;
  content << file.rdbuf();
  *text = content.str();
  Json doc = vgpu::k8s::ParseJson(*text);
  const Json* list = doc.is_discarded() ? nullptr : vgpu::k8s::JsonFind(doc, {"gpus"});
  if (list == nullptr || !list->is_array()) {
    *error = path + ": expected {\"gpus\": [...]}";
    return false;
  }
  gpus->clear();
  for (const Json& entry : *list) {
    if (!entry.is_object()) continue;
    GpuInfo gpu;
    gpu.uuid = entry.value("uuid", "");
    gpu.index = entry.value("index", 0);
    gpu.memory_bytes = entry.value("memory_mib", static_cast<uint64_t>(0)) * 1024 * 1024;
    gpu.name = entry.value("name", "");
    gpu.numa_node = entry.value("numa", -1);  // -1: unknown (as from NVML through vgpu-node)
    gpu.healthy = entry.value("healthy", true);
    gpus->push_back(gpu);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpus_path;
  vgpu::k8s::PluginConfig config;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      fprintf(stderr, "usage: %s --gpus=FILE [--log-level=N] [--<setting>=<value>]...\n", argv[0]);
      return 2;
    }
    const std::string key = arg.substr(2, eq - 2);
    const std::string value = arg.substr(eq + 1);
    if (key == "gpus") {
      gpus_path = value;
    } else if (key == "log-level") {
      vgpu::SetLogLevel(static_cast<vgpu::LogLevel>(std::atoi(value.c_str())));
    } else if (vgpu::k8s::Status status = vgpu::k8s::ApplyPluginSetting(key, value, &config); !status.ok) {
      fprintf(stderr, "vgpu-k8s-test-node: %s\n", status.message.c_str());
      return 2;
    }
  }
  if (vgpu::k8s::Status status = vgpu::k8s::FinishPluginConfig(getenv, &config); !status.ok) {
    fprintf(stderr, "vgpu-k8s-test-node: %s\n", status.message.c_str());
    return 2;
  }
  std::string text;
  std::string error;
  std::vector<GpuInfo> gpus;
  if (gpus_path.empty() || !ReadGpus(gpus_path, &text, &gpus, &error)) {
    fprintf(stderr, "vgpu-k8s-test-node: %s\n", gpus_path.empty() ? "--gpus=FILE is required" : error.c_str());
    return 2;
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: all inherit it

  vgpu::k8s::Status status;
  auto plugin = vgpu::k8s::K8sPlugin::Create(config, gpus, {}, &status);
  if (!plugin) {
    fprintf(stderr, "vgpu-k8s-test-node: %s\n", status.message.c_str());
    return 1;
  }
  if (status = plugin->Start(); !status.ok) {
    fprintf(stderr, "vgpu-k8s-test-node: %s\n", status.message.c_str());
    return 1;
  }
  fprintf(stderr, "vgpu-k8s-test-node: serving mode %s\n", vgpu::k8s::PluginModeName(config.mode));

  const struct timespec tick = {0, 100 * 1000 * 1000};
  while (sigtimedwait(&signals, nullptr, &tick) < 0) {
    std::string now;
    std::vector<GpuInfo> changed;
    if (ReadGpus(gpus_path, &now, &changed, &error) && now != text) {
      text = now;
      plugin->SetGpus(changed);
    }
  }
  plugin->Stop();
  fprintf(stderr, "vgpu-k8s-test-node: stopped\n");
  return 0;
}
