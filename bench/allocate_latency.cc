// allocate_latency: how long the device plugin's Allocate takes, as the kubelet sees it.
//
// The plugin (src/k8s, the same K8sPlugin that vgpu-node hosts) serves on a unix socket in a
// temp directory; a test kubelet (tests/k8s/test_kubelet.h) registers it and calls Allocate over
// gRPC, one container per call, timing each call from request to answer. Every call is a full
// allocation: for hami/volcano the API server is read (node, pod or pod list), the pod's
// annotation popped with a guarded merge patch, bind-phase set, the lock released; the ledger
// of the container is created on disk (tmpfs or whatever /tmp is). The node holds at most 100
// pods at a time (the oldest are deleted), which is what Volcano's pod lookup lists.
//
//   allocate_latency [--mode=hami|volcano|standalone|all] [--api=fake|https] [--iterations=N] [--dir=/tmp]
//
//   --dir        where the ledgers and sockets go (each new ledger is fdatasync'ed: on a disk
//                that sync is most of the cost; /dev/shm shows the rest)
//   --api=fake   in-memory API (src/k8s/fake_kube_api.h): the plugin's own cost
//   --api=https  the TLS test API server (tests/k8s/test_apiserver.py, python3): adds real HTTPS
//                round trips to a slow server, an upper bound rather than a cluster figure
// Prints one line per mode: calls, p50, p90, p99, max (microseconds), and API calls per Allocate.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>

#include "k8s/fake_kube_api.h"
#include "k8s/k8s_plugin.h"
#include "k8s/kube_client.h"
#include "k8s/scheduler_protocol.h"
#include "test_kubelet.h"

namespace {

using namespace std::chrono_literals;
using vgpu::k8s::Json;

constexpr char kNode[] = "bench-node";
constexpr char kGpu0[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kGpu1[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
constexpr int kPodsPerNode = 100;  // pods listed by Volcano's lookup (Kubernetes' default max is 110)

struct Options {
  std::string mode = "all";
  std::string api = "fake";
  int iterations = 500;
  std::string root = "/tmp";  // where the state (ledgers) and sockets go
};

// A KubeApi that forwards to another one and counts the calls.
class CountingApi : public vgpu::k8s::KubeApi {
 public:
  explicit CountingApi(vgpu::k8s::KubeApi* inner) : inner_(inner) {}
  vgpu::k8s::ApiResponse Get(const std::string& path) override {
    ++calls;
    return inner_->Get(path);
  }
  vgpu::k8s::ApiResponse MergePatch(const std::string& path, const Json& patch) override {
    ++calls;
    return inner_->MergePatch(path, patch);
  }
  vgpu::k8s::ApiResponse Watch(const std::string& path, const std::function<bool(const Json&)>& on_event,
                               const std::atomic<bool>* stop) override {
    return inner_->Watch(path, on_event, stop);
  }
  std::atomic<int> calls{0};

 private:
  vgpu::k8s::KubeApi* const inner_;
};

// Stores objects on either API: the fake directly, the test server through its control path.
struct ApiBackend {
  vgpu::k8s::FakeKubeApi* fake = nullptr;
  vgpu::k8s::KubeApi* https = nullptr;
  bool Put(const std::string& path, const Json& object) {
    if (fake != nullptr) {
      fake->Put(path, object);
      return true;
    }
    return https->MergePatch("/_test/objects" + path, object).ok();
  }
  void Remove(const std::string& path) {
    if (fake != nullptr) {
      fake->Remove(path);
    } else {
      https->MergePatch("/_test/delete" + path, Json::object());
    }
  }
};

struct Result {
  std::vector<double> micros;
  double api_calls_per_allocate = 0;
  int failures = 0;
};

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t at = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(at, values.size() - 1)];
}

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

Result Run(const std::string& mode, const Options& options, const std::string& dir, ApiBackend backend,
           vgpu::k8s::KubeApi* plugin_api_target, const vgpu::k8s::KubeClientOptions& https_options) {
  const std::string kubelet_dir = dir + "/kubelet-" + mode;
  std::filesystem::create_directories(kubelet_dir);
  vgpu::k8s::testing::TestKubelet kubelet(kubelet_dir);
  kubelet.Start();
  vgpu::k8s::PluginConfig config;
  vgpu::k8s::ApplyPluginSetting("mode", mode, &config);
  config.node_name = kNode;
  config.device_plugin_dir = kubelet_dir;
  config.paths.state_dir = dir + "/state-" + mode;
  config.register_interval_s = 3600;
  config.volcano_memory_factor = 64;
  config.api = https_options;
  std::vector<vgpu::k8s::GpuInfo> gpus = {{kGpu0, 0, 81559ull << 20, "NVIDIA H100", 0, true},
                                          {kGpu1, 1, 81559ull << 20, "NVIDIA H100", 1, true}};
  Json node = {{"metadata", {{"name", kNode}, {"annotations", Json::object()}}}};
  if (mode != "standalone") backend.Put(vgpu::k8s::NodePath(kNode), node);
  vgpu::k8s::K8sPluginDeps deps;
  auto counting = std::make_unique<CountingApi>(plugin_api_target);
  CountingApi* counter = counting.get();
  if (mode != "standalone") deps.api = std::move(counting);
  vgpu::k8s::Status status;
  auto plugin = vgpu::k8s::K8sPlugin::Create(config, gpus, std::move(deps), &status);
  Result result;
  if (!plugin || !(status = plugin->Start()).ok) {
    fprintf(stderr, "allocate_latency: %s: %s\n", mode.c_str(), status.message.c_str());
    result.failures = 1;
    return result;
  }
  const bool volcano = mode == "volcano";
  const vgpu::k8s::SchedulerProtocol& protocol = volcano ? vgpu::k8s::kVolcanoProtocol : vgpu::k8s::kHamiProtocol;
  const std::string resource = mode == "hami" ? "nvidia.com/gpu" : volcano ? "volcano.sh/vgpu-number" : "vgpu.io/memory";
  kubelet.WaitForRegistration(resource, 1, 10s);
  if (mode == "standalone") kubelet.WaitForRegistration("vgpu.io/compute", 1, 10s);
  std::this_thread::sleep_for(200ms);  // let the node reporter's first report and watch settle
  const int calls_before = counter->calls.load();
  for (int i = 0; i < options.iterations; ++i) {
    const std::string name = "pod-" + std::to_string(i);
    const char* gpu = i % 2 == 0 ? kGpu0 : kGpu1;
    std::vector<std::vector<std::string>> ids;
    if (mode != "standalone") {
      Json pod = {{"metadata",
                   {{"namespace", "bench"},
                    {"name", name},
                    {"uid", "uid-" + std::to_string(i)},
                    {"annotations",
                     {{protocol.devices_to_allocate, std::string(gpu) + ",NVIDIA,1000,30:" + (volcano ? "" : ";")},
                      {protocol.assigned_node, kNode},
                      {protocol.bind_phase, "allocating"}}}}},
                  {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}}}}}},
                  {"status", {{"phase", "Pending"}}}};
      backend.Put(vgpu::k8s::PodPath("bench", name), pod);
      // A node holds a bounded number of pods: the oldest leave as new ones come.
      if (i >= kPodsPerNode) backend.Remove(vgpu::k8s::PodPath("bench", "pod-" + std::to_string(i - kPodsPerNode)));
      node["metadata"]["annotations"][protocol.lock_annotation] =
          volcano ? std::string("2026-11-21T09:30:05Z") : "2026-11-21T09:30:05Z,bench," + name;
      backend.Put(vgpu::k8s::NodePath(kNode), node);
      ids = {{std::string(gpu) + "-0"}};
    } else {
      ids = {{std::string(gpu) + "_0", std::string(gpu) + "_1"}};
    }
    v1beta1::AllocateResponse response;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status answer = kubelet.Allocate(resource, ids, &response);
    if (mode == "standalone" && answer.ok()) {
      std::vector<std::string> compute;
      for (int n = 0; n < 50; ++n) compute.push_back(std::string(gpu) + "_" + std::to_string(n));
      v1beta1::AllocateResponse second;
      answer = kubelet.Allocate("vgpu.io/compute", {compute}, &second);
    }
    const auto took = std::chrono::steady_clock::now() - start;
    if (!answer.ok()) {
      if (++result.failures == 1) fprintf(stderr, "allocate_latency: %s: %s\n", mode.c_str(), answer.error_message().c_str());
      continue;
    }
    result.micros.push_back(std::chrono::duration<double, std::micro>(took).count());
    if (mode != "standalone") node["metadata"]["annotations"].erase(protocol.lock_annotation);
  }
  if (mode != "standalone" && !result.micros.empty()) {
    result.api_calls_per_allocate = static_cast<double>(counter->calls.load() - calls_before) / options.iterations;
  }
  plugin->Stop();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--mode=", 0) == 0) {
      options.mode = arg.substr(7);
    } else if (arg.rfind("--api=", 0) == 0) {
      options.api = arg.substr(6);
    } else if (arg.rfind("--dir=", 0) == 0) {
      options.root = arg.substr(6);
    } else if (arg.rfind("--iterations=", 0) == 0) {
      options.iterations = std::max(1, std::atoi(arg.c_str() + 13));
    } else {
      fprintf(stderr, "usage: %s [--mode=hami|volcano|standalone|all] [--api=fake|https] [--iterations=N] [--dir=/tmp]\n", argv[0]);
      return 2;
    }
  }
  std::string pattern = options.root + "/vgpu-allocate-bench-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    perror(pattern.c_str());
    return 1;
  }
  const std::string dir = pattern;

  vgpu::k8s::FakeKubeApi fake;
  std::unique_ptr<vgpu::k8s::HttpKubeApi> https;
  vgpu::k8s::KubeClientOptions https_options;
  pid_t server = -1;
  ApiBackend backend;
  vgpu::k8s::KubeApi* target = &fake;
  if (options.api == "https") {
    const std::string api_dir = dir + "/api";
    std::filesystem::create_directories(api_dir);
    server = fork();
    if (server == 0) {
      execlp("python3", "python3", VGPU_TEST_APISERVER, "--dir", api_dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 300 && !std::filesystem::exists(api_dir + "/port"); ++i) std::this_thread::sleep_for(100ms);
    https_options.server = "https://127.0.0.1:" + ReadText(api_dir + "/port");
    https_options.ca_file = api_dir + "/ca.crt";
    https_options.token_file = api_dir + "/token";
    vgpu::k8s::Status status;
    https = vgpu::k8s::HttpKubeApi::Create(https_options, &status);
    if (!https) {
      fprintf(stderr, "allocate_latency: %s\n", status.message.c_str());
      return 1;
    }
    backend.https = https.get();
    target = https.get();
  } else if (options.api == "fake") {
    backend.fake = &fake;
  } else {
    fprintf(stderr, "allocate_latency: --api must be fake or https\n");
    return 2;
  }

  std::vector<std::string> modes = {"hami", "volcano", "standalone"};
  if (options.mode != "all") modes = {options.mode};
  printf("# Allocate latency over gRPC (unix socket), %d calls per mode, API: %s, state in %s\n", options.iterations,
         options.api.c_str(), options.root.c_str());
  printf("%-11s %7s %9s %9s %9s %9s %10s\n", "mode", "calls", "p50_us", "p90_us", "p99_us", "max_us", "api_calls");
  int failures = 0;
  for (const std::string& mode : modes) {
    Result result = Run(mode, options, dir, backend, target, https_options);
    failures += result.failures;
    printf("%-11s %7zu %9.0f %9.0f %9.0f %9.0f %10.1f%s\n", mode.c_str(), result.micros.size(),
           Percentile(result.micros, 0.50), Percentile(result.micros, 0.90), Percentile(result.micros, 0.99),
           Percentile(result.micros, 1.0), result.api_calls_per_allocate,
           mode == "standalone" ? "  (memory + compute: two Allocate calls, no API)" : "");
  }
  if (server > 0) {
    kill(server, SIGTERM);
    waitpid(server, nullptr, 0);
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
