// Integration tests of the Kubernetes device plugin: the node binary runs as a separate process
// against a test kubelet (test_kubelet.h, gRPC over unix sockets in a temp directory) and a test
// API server (test_apiserver.py: HTTPS with a test CA, resourceVersion semantics, 409 on
// conflict, watch). Nothing here talks to a real cluster.
//
// The node binary is the real vgpu-node (mode hami, volcano or standalone) on the simulated NVML
// (tests/simdriver: two GPUs; XID events injected through a file make a GPU unhealthy, and it
// recovers after health_recovery) when vgpu-node is part of the build (VGPU_NODE_BINARY);
// otherwise vgpu-k8s-test-node, which hosts the same module with the same two GPUs read from a
// file. The GPUs, and so every golden string, are the same for both.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "k8s/kube_client.h"
#include "k8s/scheduler_protocol.h"
#include "ledger/ledger.h"
#include "test_kubelet.h"

namespace vgpu::k8s {
namespace {

using namespace std::chrono_literals;
using testing::TestKubelet;

constexpr char kNode[] = "gpu-node-1";
// The simulated NVML's GPUs (tests/simdriver/README.md).
constexpr char kGpu0[] = "GPU-5151a000-0000-4000-8000-000000000000";
constexpr char kGpu1[] = "GPU-5151a000-0000-4000-8000-000000000001";
constexpr char kGpuName[] = "Simulated GPU (vgpu test double)";
constexpr char kLockTime[] = "2026-11-21T09:30:05Z";

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::filesystem::rename(path + ".tmp", path);
}

// A child process with its output in a log file; SIGTERM (then SIGKILL) when destroyed.
class Child {
 public:
  Child(std::vector<std::string> argv, const std::string& log, const std::map<std::string, std::string>& env = {})
      : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (auto& arg : argv) args.push_back(arg.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() { Stop(); }
  // Returns the exit status (or -signal).
  int Stop() {
    if (pid_ <= 0) return status_;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && !Reaped(); ++i) std::this_thread::sleep_for(50ms);
    if (pid_ > 0) {  // still running: never signal anything but our own child
      kill(pid_, SIGKILL);
      int raw = 0;
      waitpid(pid_, &raw, 0);
      status_ = -SIGKILL;
      pid_ = -1;
    }
    return status_;
  }
  bool Exited() { return pid_ <= 0 || Reaped(); }
  int status() const { return status_; }
  std::string Log() const { return ReadText(log_); }

 private:
  // True once the child has exited (and was reaped here). Only ever waits for pid_ itself.
  bool Reaped() {
    if (pid_ <= 0) return true;
    int raw = 0;
    if (waitpid(pid_, &raw, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : -WTERMSIG(raw);
    pid_ = -1;
    return true;
  }
  pid_t pid_ = -1;
  int status_ = 0;
  std::string log_;
};

class K8sIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vgpu-k8s-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    for (const char* sub : {"kubelet", "state", "api"}) std::filesystem::create_directory(dir_ + "/" + sub);
    std::ofstream(events()).flush();
    kubelet_ = std::make_unique<TestKubelet>(dir_ + "/kubelet");
    ASSERT_TRUE(kubelet_->Start());
  }

  void TearDown() override {
    if (node_) {
      const int status = node_->Stop();
      EXPECT_EQ(status, 0) << "the node binary did not stop cleanly:\n" << node_->Log();
      if (HasFailure()) std::cerr << "--- node log ---\n" << node_->Log();
    }
    kubelet_.reset();
    api_server_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string events() const { return dir_ + "/nvml-events"; }
  // Makes GPU `index` unhealthy (healthy = false) or lets it recover (true). vgpu-node: a
  // critical XID event; it recovers by itself after health_recovery (1 s). The test host: its
  // GPU file is rewritten.
  void SetGpuHealth(int index, bool healthy) {
#ifdef VGPU_NODE_BINARY
    if (!healthy) std::ofstream(events(), std::ios::app) << index << " xid 79\n";
#else
    healthy_[index] = healthy;
    WriteGpuFile();
#endif
  }
#ifndef VGPU_NODE_BINARY
  void WriteGpuFile() {
    Json gpus = Json::array();
    for (int i = 0; i < 2; ++i) {
      gpus.push_back({{"uuid", i == 0 ? kGpu0 : kGpu1}, {"index", i}, {"memory_mib", gpu_memory_mib_},
                      {"name", kGpuName}, {"healthy", healthy_[i]}});
    }
    WriteText(dir_ + "/gpus.json", Json{{"gpus", gpus}}.dump());
  }
  int gpu_memory_mib_ = 81559;
  bool healthy_[2] = {true, true};
#endif

  void StartApiServer() {
    const std::string api = dir_ + "/api";
    api_server_ = std::make_unique<Child>(std::vector<std::string>{"python3", VGPU_TEST_APISERVER, "--dir", api},
                                          dir_ + "/apiserver.log");
    ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(api + "/port"); }, 30s)) << api_server_->Log();
    server_ = "https://127.0.0.1:" + ReadText(api + "/port");
    KubeClientOptions options;
    options.server = server_;
    options.ca_file = api + "/ca.crt";
    options.token_file = api + "/token";
    options.token_refresh_seconds = 1;
    Status status;
    api_ = HttpKubeApi::Create(options, &status);
    ASSERT_TRUE(api_) << status.message;
    Put(NodePath(kNode), {{"metadata", {{"name", kNode}, {"annotations", Json::object()}}}});
  }

  // Creates or replaces an object on the test API server.
  void Put(const std::string& path, const Json& object) {
    ApiResponse answer = api_->MergePatch("/_test/objects" + path, object);
    ASSERT_TRUE(answer.ok()) << answer.Describe();
  }
  Json Get(const std::string& path) {
    ApiResponse answer = api_->Get(path);
    EXPECT_TRUE(answer.ok()) << path << ": " << answer.Describe();
    return answer.body;
  }
  std::string Annotation(const std::string& path, const std::string& key) {
    auto annotations = Annotations(Get(path));
    auto it = annotations.find(key);
    return it == annotations.end() ? "<absent>" : it->second;
  }
  void InjectFailure(const std::string& method, const std::string& prefix, int count, int status) {
    ApiResponse answer = api_->MergePatch("/_test/fail", {{"method", method}, {"prefix", prefix}, {"count", count}, {"status", status}});
    ASSERT_TRUE(answer.ok()) << answer.Describe();
  }

  void AddPod(const std::string& name, const std::string& devices, const SchedulerProtocol& protocol, Json env = nullptr) {
    Json pod = {{"metadata",
                 {{"namespace", "team"},
                  {"name", name},
                  {"uid", "uid-" + name},
                  {"annotations",
                   {{protocol.devices_to_allocate, devices}, {protocol.assigned_node, kNode}, {protocol.bind_phase, "allocating"}}}}},
                {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}}}}}},
                {"status", {{"phase", "Pending"}}}};
    if (!env.is_null()) pod["spec"]["containers"][0]["env"] = env;
    Put(PodPath("team", name), pod);
  }
  void Lock(const std::string& key, const std::string& value) {
    Json node = Get(NodePath(kNode));
    node["metadata"]["annotations"][key] = value;
    Put(NodePath(kNode), node);
  }

  // Starts the node binary in `mode` with extra module settings ("key=value"); waits until every
  // resource registered. The GPUs have `gpu_memory_mib` each.
  void StartNode(const std::string& mode, const std::vector<std::string>& settings, std::vector<std::string> resources,
                 int gpu_memory_mib = 81559) {
    LaunchNode(mode, settings, gpu_memory_mib);
    for (const std::string& resource : resources) {
      ASSERT_TRUE(kubelet_->WaitForRegistration(resource, 1, 20s)) << resource << " never registered:\n" << node_->Log();
    }
  }
  void LaunchNode(const std::string& mode, std::vector<std::string> settings, int gpu_memory_mib) {
    settings.push_back("device_plugin_dir=" + dir_ + "/kubelet");
    if (!server_.empty()) {
      settings.push_back("api_server=" + server_);
      settings.push_back("api_ca_file=" + dir_ + "/api/ca.crt");
      settings.push_back("api_token_file=" + dir_ + "/api/token");
      settings.push_back("api_token_refresh_s=3600");
    }
#ifdef VGPU_NODE_BINARY
    // vgpu-node: the module's options are "<mode>.<key>".
    std::vector<std::string> argv = {VGPU_NODE_BINARY,
                                     "--mode=" + mode,
                                     "--state_dir=" + dir_ + "/state",
                                     "--metrics_listen=off",
                                     "--nvml_library=" + std::string(VGPU_SIM_DIR) + "/libnvidia-ml.so.1",
                                     "--health_recovery=1s",
                                     "--log_level=info",
                                     "--node_name=" + std::string(kNode)};
    for (const std::string& setting : settings) argv.push_back("--" + mode + "." + setting);
    const std::map<std::string, std::string> env = {{"VGPU_SIM_DEVICE_COUNT", "2"},
                                                    {"VGPU_SIM_MEMORY", std::to_string(gpu_memory_mib) + "MiB"},
                                                    {"VGPU_SIM_NVML_EVENTS", events()}};
#else
    gpu_memory_mib_ = gpu_memory_mib;
    WriteGpuFile();
    std::vector<std::string> argv = {VGPU_K8S_TEST_NODE, "--gpus=" + dir_ + "/gpus.json", "--log-level=3",
                                     "--mode=" + mode, "--node_name=" + std::string(kNode),
                                     "--state_dir=" + dir_ + "/state"};
    for (const std::string& setting : settings) argv.push_back("--" + setting);
    const std::map<std::string, std::string> env;
#endif
    node_ = std::make_unique<Child>(argv, dir_ + "/node.log", env);
  }

  std::vector<std::string> DeviceIds(const std::string& resource) {
    auto list = kubelet_->WatchDevices(resource, [](const auto& l) { return l.devices_size() > 0; }, 10s);
    std::vector<std::string> ids;
    for (const auto& device : list.devices()) ids.push_back(device.id());
    return ids;
  }

  ledger::LimitSet LedgerLimits(const std::string& key) {
    ledger::LedgerStatus status;
    auto ledger = ledger::Ledger::OpenReadOnly(dir_ + "/state/containers/" + key + "/ledger", &status);
    EXPECT_TRUE(ledger) << status.message;
    return ledger ? ledger->Limits() : ledger::LimitSet{};
  }

  std::string dir_;
  std::string server_;
  std::unique_ptr<TestKubelet> kubelet_;
  std::unique_ptr<Child> api_server_;
  std::unique_ptr<HttpKubeApi> api_;
  std::unique_ptr<Child> node_;
};

std::map<std::string, std::string> Envs(const v1beta1::AllocateResponse& response, int container = 0) {
  const auto& envs = response.container_responses(container).envs();
  return {envs.begin(), envs.end()};
}

std::map<std::string, std::string> Mounts(const v1beta1::AllocateResponse& response) {
  std::map<std::string, std::string> out;
  for (const auto& mount : response.container_responses(0).mounts()) out[mount.container_path()] = mount.host_path();
  return out;
}

const char kHamiGolden[] =
    "[{\"id\":\"GPU-5151a000-0000-4000-8000-000000000000\",\"count\":10,\"devmem\":81559,\"devcore\":100,"
    "\"type\":\"NVIDIA-Simulated GPU (vgpu test double)\",\"mode\":\"hami-core\",\"health\":true},"
    "{\"id\":\"GPU-5151a000-0000-4000-8000-000000000001\",\"index\":1,\"count\":10,\"devmem\":81559,\"devcore\":100,"
    "\"type\":\"NVIDIA-Simulated GPU (vgpu test double)\",\"mode\":\"hami-core\",\"health\":true}]";

TEST_F(K8sIntegrationTest, HamiRegistersWithTheKubeletAndAnnotatesTheNode) {
  StartApiServer();
  StartNode("hami", {}, {"nvidia.com/gpu"});
  auto request = kubelet_->WaitForRegistration("nvidia.com/gpu", 1, 1s);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->version(), "v1beta1");
  EXPECT_EQ(request->endpoint(), "vgpu-nvidia.com_gpu.sock");
  EXPECT_TRUE(request->options().get_preferred_allocation_available());
  // 10 virtual devices per GPU, "<uuid>-<n>".
  auto list = kubelet_->WatchDevices("nvidia.com/gpu", [](const auto& l) { return l.devices_size() == 20; }, 10s);
  ASSERT_EQ(list.devices_size(), 20);
  EXPECT_EQ(list.devices(0).id(), std::string(kGpu0) + "-0");
  EXPECT_EQ(list.devices(19).id(), std::string(kGpu1) + "-9");
  EXPECT_EQ(list.devices(19).health(), "Healthy");
  // Node annotations, byte for byte what HAMi 2.8 parses.
  ASSERT_TRUE(WaitFor([&] { return Annotation(NodePath(kNode), "hami.io/node-nvidia-register") != "<absent>"; }, 10s));
  EXPECT_EQ(Annotation(NodePath(kNode), "hami.io/node-nvidia-register"), kHamiGolden);
  EXPECT_EQ(Annotation(NodePath(kNode), "hami.io/node-handshake").rfind("Reported ", 0), 0u);
}

TEST_F(K8sIntegrationTest, HamiHandshakeRequestIsAnsweredAtOnce) {
  StartApiServer();
  StartNode("hami", {"register_interval_s=3600"}, {"nvidia.com/gpu"});
  ASSERT_TRUE(WaitFor([&] { return Annotation(NodePath(kNode), "hami.io/node-handshake").rfind("Reported", 0) == 0; }, 10s));
  // The scheduler asks again (it drops nodes that do not answer within a minute).
  Lock("hami.io/node-handshake", "Requesting_2026.11.21 09:30:05");
  EXPECT_TRUE(WaitFor([&] { return Annotation(NodePath(kNode), "hami.io/node-handshake").rfind("Reported", 0) == 0; }, 5s))
      << Annotation(NodePath(kNode), "hami.io/node-handshake");
}

TEST_F(K8sIntegrationTest, TwoPendingPodsNeverReceiveEachOthersDevices) {
  StartApiServer();
  AddPod("pod-a", std::string(kGpu0) + ",NVIDIA,10000,30:;", kHamiProtocol);
  AddPod("pod-b", std::string(kGpu1) + ",NVIDIA,20000,60:;", kHamiProtocol);
  StartNode("hami", {}, {"nvidia.com/gpu"});
  const std::vector<std::string> ids = DeviceIds("nvidia.com/gpu");
  ASSERT_EQ(ids.size(), 20u);
  std::vector<std::string> chosen;
  ASSERT_TRUE(kubelet_->Preferred("nvidia.com/gpu", ids, 1, &chosen).ok());
  ASSERT_EQ(chosen.size(), 1u);

  // The scheduler locked the node for pod-b: the kubelet's Allocate is pod-b's.
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,pod-b");
  v1beta1::AllocateResponse for_b;
  grpc::Status status = kubelet_->Allocate("nvidia.com/gpu", {chosen}, &for_b);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Envs(for_b)["NVIDIA_VISIBLE_DEVICES"], kGpu1);
  EXPECT_EQ(Envs(for_b)["CUDA_DEVICE_MEMORY_LIMIT_0"], "20000m");
  EXPECT_EQ(Envs(for_b)["CUDA_DEVICE_SM_LIMIT_0"], "60");
  EXPECT_EQ(Envs(for_b)["VGPU_POD_UID"], "uid-pod-b");
  EXPECT_EQ(Mounts(for_b)["/var/lib/vgpu/container"], dir_ + "/state/containers/uid-pod-b_main");
  EXPECT_EQ(Mounts(for_b)["/var/lib/vgpu/vgpu.sock"], dir_ + "/state/vgpu.sock");
  EXPECT_EQ(Mounts(for_b).count("/etc/ld.so.preload"), 1u);
  EXPECT_EQ(Annotation(PodPath("team", "pod-b"), "hami.io/bind-phase"), "success");
  EXPECT_EQ(Annotation(NodePath(kNode), "hami.io/mutex.lock"), "<absent>");
  // pod-a is untouched until the scheduler locks the node for it.
  EXPECT_EQ(Annotation(PodPath("team", "pod-a"), "hami.io/vgpu-devices-to-allocate"), std::string(kGpu0) + ",NVIDIA,10000,30:;");
  v1beta1::AllocateResponse unlocked;
  EXPECT_FALSE(kubelet_->Allocate("nvidia.com/gpu", {chosen}, &unlocked).ok());
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,pod-a");
  v1beta1::AllocateResponse for_a;
  status = kubelet_->Allocate("nvidia.com/gpu", {chosen}, &for_a);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Envs(for_a)["NVIDIA_VISIBLE_DEVICES"], kGpu0);
  EXPECT_EQ(Envs(for_a)["VGPU_POD_UID"], "uid-pod-a");

  // Each container's ledger holds its own limits, written by the node daemon.
  ledger::LimitSet b = LedgerLimits("uid-pod-b_main");
  EXPECT_EQ(b.authority, ledger::Authority::kNodeDaemon);
  ASSERT_EQ(b.devices.size(), 1u);
  EXPECT_EQ(b.devices[0].memory_limit, 20000ull << 20);
  EXPECT_EQ(b.devices[0].sm_limit, 60);
  ledger::LimitSet a = LedgerLimits("uid-pod-a_main");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].memory_limit, 10000ull << 20);
}

TEST_F(K8sIntegrationTest, MalformedAnnotationFailsAllocateMarksFailedAndReleasesTheLock) {
  StartApiServer();
  AddPod("broken", std::string(kGpu0) + ",NVIDIA,ten-gigs,30:;", kHamiProtocol);
  StartNode("hami", {}, {"nvidia.com/gpu"});
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,broken");
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_->Allocate("nvidia.com/gpu", {{std::string(kGpu0) + "-0"}}, &response);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("team/broken"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("memory \"ten-gigs\""), std::string::npos) << status.error_message();
  EXPECT_EQ(Annotation(PodPath("team", "broken"), "hami.io/bind-phase"), "failed");
  EXPECT_EQ(Annotation(NodePath(kNode), "hami.io/mutex.lock"), "<absent>");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state/containers/uid-broken_main"));
  EXPECT_FALSE(node_->Exited()) << "a failed Allocate must not stop the daemon";
}

TEST_F(K8sIntegrationTest, DisableControlInThePodSpecSkipsThePreloadMount) {
  StartApiServer();
  AddPod("raw", std::string(kGpu0) + ",NVIDIA,1000,0:;", kHamiProtocol, {{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "true"}}});
  StartNode("hami", {}, {"nvidia.com/gpu"});
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,raw");
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(kubelet_->Allocate("nvidia.com/gpu", {{std::string(kGpu0) + "-0"}}, &response).ok());
  EXPECT_EQ(Mounts(response).count("/etc/ld.so.preload"), 0u);
  EXPECT_EQ(Mounts(response).count("/usr/local/vgpu/libvgpu.so"), 1u);
}

TEST_F(K8sIntegrationTest, ApiOutageFailsAllocateWithAReasonAndTheNextOneWorks) {
  StartApiServer();
  AddPod("later", std::string(kGpu0) + ",NVIDIA,1000,10:;", kHamiProtocol);
  StartNode("hami", {}, {"nvidia.com/gpu"});
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,later");
  InjectFailure("GET", PodPath("team", "later"), 1, 503);
  v1beta1::AllocateResponse failed;
  grpc::Status status = kubelet_->Allocate("nvidia.com/gpu", {{std::string(kGpu0) + "-0"}}, &failed);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error_message().find("cannot read pod team/later: HTTP 503"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("node lock hami.io/mutex.lock released"), std::string::npos) << status.error_message();
  EXPECT_EQ(Annotation(NodePath(kNode), "hami.io/mutex.lock"), "<absent>");
  // The scheduler retries: lock again, and this time the API answers.
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,later");
  v1beta1::AllocateResponse ok;
  status = kubelet_->Allocate("nvidia.com/gpu", {{std::string(kGpu0) + "-0"}}, &ok);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(node_->Exited());
}

TEST_F(K8sIntegrationTest, RotatedServiceAccountTokenIsReread) {
  StartApiServer();
  AddPod("rotated", std::string(kGpu1) + ",NVIDIA,1000,10:;", kHamiProtocol);
  StartNode("hami", {}, {"nvidia.com/gpu"});
  Lock("hami.io/mutex.lock", std::string(kLockTime) + ",team,rotated");
  WriteText(dir_ + "/api/token", "token-2\n");  // the old token is refused from now on (401)
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_->Allocate("nvidia.com/gpu", {{std::string(kGpu1) + "-0"}}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Envs(response)["NVIDIA_VISIBLE_DEVICES"], kGpu1);
}

TEST_F(K8sIntegrationTest, KubeletRestartLeadsToReregistrationWithinTwoSeconds) {
  StartApiServer();
  StartNode("hami", {}, {"nvidia.com/gpu"});
  ASSERT_EQ(DeviceIds("nvidia.com/gpu").size(), 20u);
  const int before = kubelet_->registrations("nvidia.com/gpu");
  const auto restarted = std::chrono::steady_clock::now();
  ASSERT_TRUE(kubelet_->Restart());
  auto again = kubelet_->WaitForRegistration("nvidia.com/gpu", before + 1, 2s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - restarted);
  ASSERT_TRUE(again) << "no re-registration within 2 s";
  std::cout << "re-registered " << took.count() << " ms after the kubelet restart\n";
  // The new endpoint serves.
  EXPECT_EQ(DeviceIds("nvidia.com/gpu").size(), 20u);
}

TEST_F(K8sIntegrationTest, GpuTurnsUnhealthyAndRecovers) {
  StartApiServer();
  StartNode("hami", {"register_interval_s=3600"}, {"nvidia.com/gpu"});
  auto health_of = [](const v1beta1::ListAndWatchResponse& list, const std::string& prefix) {
    std::set<std::string> health;
    for (const auto& device : list.devices()) {
      if (device.id().rfind(prefix, 0) == 0) health.insert(device.health());
    }
    return health;
  };
  kubelet_->WatchDevices("nvidia.com/gpu", [](const auto& l) { return l.devices_size() == 20; }, 10s);
  SetGpuHealth(1, false);
  auto sick = kubelet_->WatchDevices(
      "nvidia.com/gpu", [&](const auto& l) { return health_of(l, kGpu1) == std::set<std::string>{"Unhealthy"}; }, 5s);
  EXPECT_EQ(health_of(sick, kGpu1), std::set<std::string>{"Unhealthy"});
  EXPECT_EQ(health_of(sick, kGpu0), std::set<std::string>{"Healthy"});
  // The scheduler learns it too (HAMi omits "health" when false).
  EXPECT_TRUE(WaitFor([&] {
    return Annotation(NodePath(kNode), "hami.io/node-nvidia-register").find("\"index\":1,\"count\":10,\"devmem\":81559,\"devcore\":100,\"type\":\"NVIDIA-Simulated GPU (vgpu test double)\",\"mode\":\"hami-core\"}") != std::string::npos;
  }, 5s)) << Annotation(NodePath(kNode), "hami.io/node-nvidia-register");
  SetGpuHealth(1, true);
  auto well = kubelet_->WatchDevices(
      "nvidia.com/gpu", [&](const auto& l) { return health_of(l, kGpu1) == std::set<std::string>{"Healthy"}; }, 5s);
  EXPECT_EQ(health_of(well, kGpu1), std::set<std::string>{"Healthy"});
  EXPECT_TRUE(WaitFor([&] { return Annotation(NodePath(kNode), "hami.io/node-nvidia-register") == kHamiGolden; }, 5s));
}

TEST_F(K8sIntegrationTest, VolcanoRegistersThreeResourcesAndAllocates) {
  StartApiServer();
  AddPod("vc", std::string(kGpu1) + ",NVIDIA,1000,25:", kVolcanoProtocol);
  StartNode("volcano", {"volcano_memory_factor=10"},
            {"volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"});
  ASSERT_TRUE(WaitFor([&] { return Annotation(NodePath(kNode), "volcano.sh/node-vgpu-register") != "<absent>"; }, 10s));
  EXPECT_EQ(Annotation(NodePath(kNode), "volcano.sh/node-vgpu-register"),
            "GPU-5151a000-0000-4000-8000-000000000000,10,8155,NVIDIA-Simulated GPU (vgpu test double),true,hami-core:"
            "GPU-5151a000-0000-4000-8000-000000000001,10,8155,NVIDIA-Simulated GPU (vgpu test double),true,hami-core:");
  EXPECT_EQ(Annotation(NodePath(kNode), "volcano.sh/node-vgpu-handshake").rfind("Reported ", 0), 0u);
  EXPECT_EQ(DeviceIds("volcano.sh/vgpu-memory").size(), 2u * 8155);
  EXPECT_EQ(DeviceIds("volcano.sh/vgpu-cores").size(), 200u);

  Lock("hamivgpu", kLockTime);
  v1beta1::AllocateResponse memory;
  ASSERT_TRUE(kubelet_->Allocate("volcano.sh/vgpu-memory", {{"1-0", "1-1"}}, &memory).ok());
  EXPECT_EQ(memory.container_responses_size(), 1);
  EXPECT_EQ(memory.container_responses(0).envs_size(), 0);
  v1beta1::AllocateResponse number;
  grpc::Status status = kubelet_->Allocate("volcano.sh/vgpu-number", {{std::string(kGpu1) + "-3"}}, &number);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Envs(number)["NVIDIA_VISIBLE_DEVICES"], kGpu1);
  EXPECT_EQ(Envs(number)["CUDA_DEVICE_MEMORY_LIMIT_0"], "10000m");  // 1000 units x factor 10
  EXPECT_EQ(Envs(number)["CUDA_DEVICE_SM_LIMIT_0"], "25");
  EXPECT_EQ(Annotation(PodPath("team", "vc"), "volcano.sh/bind-phase"), "success");
  EXPECT_EQ(Annotation(PodPath("team", "vc"), "volcano.sh/devices-to-allocate"), "");
  EXPECT_EQ(Annotation(NodePath(kNode), "hamivgpu"), "<absent>");
}

TEST_F(K8sIntegrationTest, VolcanoMemoryUnitsTooSmallForOneListAndWatchMessageAreRefused) {
  StartApiServer();
  // Two H200-sized GPUs in one-MiB units: 2 x 143771 devices, about 7 MiB of device list.
  LaunchNode("volcano", {"volcano_memory_factor=1"}, 143771);
  ASSERT_TRUE(WaitFor([&] { return node_->Exited(); }, 20s));
  EXPECT_EQ(node_->status(), 1);
  EXPECT_NE(node_->Log().find("above gRPC's 4 MiB limit"), std::string::npos) << node_->Log();
  EXPECT_NE(node_->Log().find("volcano_memory_factor"), std::string::npos) << node_->Log();
  node_.reset();
}

TEST_F(K8sIntegrationTest, KubeClientGuardsPatchesWithResourceVersion) {
  StartApiServer();
  const std::string path = PodPath("team", "guarded");
  Put(path, {{"metadata", {{"namespace", "team"}, {"name", "guarded"}, {"annotations", {{"a", "1"}}}}}});
  const std::string version = JsonString(Get(path), {"metadata", "resourceVersion"});
  // A write in between makes the version stale: the guarded patch is refused with 409.
  ASSERT_TRUE(api_->MergePatch(path, AnnotationPatch({{"b", "2"}})).ok());
  Json stale = AnnotationPatch({{"a", "3"}});
  stale["metadata"]["resourceVersion"] = version;
  ApiResponse refused = api_->MergePatch(path, stale);
  EXPECT_EQ(refused.http_status, 409);
  EXPECT_TRUE(refused.conflict());
  EXPECT_NE(refused.error.find("modified"), std::string::npos) << refused.error;
  EXPECT_EQ(Annotation(path, "a"), "1");
  // GuardedUpdate re-reads and succeeds; null removes a key (RFC 7386).
  int attempts = 0;
  Status status = GuardedUpdate(*api_, path, [&](const Json& pod, std::string*) -> std::optional<Json> {
    ++attempts;
    if (attempts == 1) {
      EXPECT_TRUE(api_->MergePatch(path, AnnotationPatch({{"c", "4"}})).ok());  // race once
    }
    return AnnotationPatch({{"a", "5"}, {"b", std::nullopt}});
  }, 5);
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(Annotation(path, "a"), "5");
  EXPECT_EQ(Annotation(path, "b"), "<absent>");
  EXPECT_EQ(Annotation(path, "c"), "4");
  // Field-selected list.
  Put(PodPath("team", "elsewhere"), {{"metadata", {{"namespace", "team"}, {"name", "elsewhere"}}}, {"spec", {{"nodeName", "other"}}}});
  Put(PodPath("team", "here"), {{"metadata", {{"namespace", "team"}, {"name", "here"}}}, {"spec", {{"nodeName", kNode}}}});
  Json list = Get(PodsOnNodePath(kNode));
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "here");
}

TEST_F(K8sIntegrationTest, KubeClientWatchesANode) {
  StartApiServer();
  const std::string version = JsonString(Get(NodePath(kNode)), {"metadata", "resourceVersion"});
  std::atomic<bool> stop{false};
  std::vector<std::string> seen;
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    api_->MergePatch(NodePath(kNode), AnnotationPatch({{"step", "1"}}));
    api_->MergePatch(NodePath(kNode), AnnotationPatch({{"step", "2"}}));
  });
  ApiResponse end = api_->Watch(NodeWatchPath(kNode, version, 10), [&](const Json& event) {
    seen.push_back(JsonString(event, {"type"}) + ":" + JsonString(event, {"object", "metadata", "annotations", "step"}));
    return seen.size() < 2;
  }, &stop);
  writer.join();
  EXPECT_TRUE(end.ok()) << end.Describe();
  EXPECT_EQ(seen, (std::vector<std::string>{"MODIFIED:1", "MODIFIED:2"}));
}

// A watch the caller stops ends soon after, while the server sends nothing: the node reporter's
// watch is what a daemon stopping waits for (libcurl's progress callback alone made it wait up
// to a second).
TEST_F(K8sIntegrationTest, KubeClientWatchEndsSoonAfterItsStop) {
  StartApiServer();
  const std::string version = JsonString(Get(NodePath(kNode)), {"metadata", "resourceVersion"});
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    std::atomic<bool> stop{false};
    std::chrono::steady_clock::time_point stopped_at;
    std::thread stopper([&] {
      std::this_thread::sleep_for(300ms);
      stopped_at = std::chrono::steady_clock::now();
      stop = true;
    });
    ApiResponse end = api_->Watch(NodeWatchPath(kNode, version, 30), [](const Json&) { return true; }, &stop);
    const auto ended_at = std::chrono::steady_clock::now();
    stopper.join();
    EXPECT_TRUE(end.ok()) << end.Describe();  // stopped by its caller: a normal end
    EXPECT_LT(ended_at - stopped_at, 400ms);
  }
}

// CancelAll (a daemon stopping) ends a request the server never answers soon after, not at its
// timeout, and every later request fails at once.
TEST_F(K8sIntegrationTest, KubeClientCancelAllEndsARequestTheServerNeverAnswers) {
  StartApiServer();  // for its CA
  const int listener = socket(AF_INET, SOCK_STREAM, 0);  // connections queue here, never accepted
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  KubeClientOptions options;
  options.server = "https://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  options.ca_file = dir_ + "/api/ca.crt";
  options.connect_timeout_ms = 10000;  // the TLS handshake waits for an answer this long
  options.timeout_ms = 10000;
  Status status;
  auto silent = HttpKubeApi::Create(options, &status);
  ASSERT_TRUE(silent) << status.message;
  std::chrono::steady_clock::time_point cancelled_at;
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    cancelled_at = std::chrono::steady_clock::now();
    silent->CancelAll();
  });
  const ApiResponse unanswered = silent->Get(NodePath(kNode));
  const auto ended_at = std::chrono::steady_clock::now();
  canceller.join();
  EXPECT_EQ(unanswered.http_status, 0);
  EXPECT_NE(unanswered.error.find("shutting down"), std::string::npos) << unanswered.error;
  EXPECT_LT(ended_at - cancelled_at, 1500ms);
  const auto later_at = std::chrono::steady_clock::now();
  const ApiResponse later = silent->MergePatch(NodePath(kNode), AnnotationPatch({{"a", "1"}}));
  EXPECT_LT(std::chrono::steady_clock::now() - later_at, 100ms);
  EXPECT_NE(later.error.find("shutting down"), std::string::npos) << later.error;
  close(listener);
}

TEST_F(K8sIntegrationTest, KubeClientRefusesAnUnknownCertificateAndAMissingToken) {
  StartApiServer();
  // A CA that did not sign the server: TLS verification fails, no answer.
  const std::string other = dir_ + "/other-ca.crt";
  ASSERT_EQ(system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + dir_ +
                    "/other.key -out " + other + " -days 1 -subj /CN=other >/dev/null 2>&1").c_str()), 0);
  KubeClientOptions options;
  options.server = server_;
  options.ca_file = other;
  options.token_file = dir_ + "/api/token";
  Status status;
  auto untrusting = HttpKubeApi::Create(options, &status);
  ASSERT_TRUE(untrusting) << status.message;
  ApiResponse refused = untrusting->Get(NodePath(kNode));
  EXPECT_EQ(refused.http_status, 0);
  EXPECT_NE(refused.error.find("certificate"), std::string::npos) << refused.error;
  // The right CA but no token: 401 from the server.
  options.ca_file = dir_ + "/api/ca.crt";
  options.token_file = "";
  auto anonymous = HttpKubeApi::Create(options, &status);
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->Get(NodePath(kNode)).http_status, 401);
  // Not https at all.
  options.server = "http://127.0.0.1:1";
  EXPECT_FALSE(HttpKubeApi::Create(options, &status));
  EXPECT_NE(status.message.find("https://"), std::string::npos);
}

// The Alnair seed's pod spec, unchanged: alnair/vgpu-memory: 2, alnair/vgpu-compute: 50.
TEST_F(K8sIntegrationTest, AlnairPodSpecYieldsATwoGiBFiftyPercentVgpu) {
  StartNode("standalone", {"standalone_preset=alnair"}, {"alnair/vgpu-memory", "alnair/vgpu-compute"});
  const std::vector<std::string> memory_ids = DeviceIds("alnair/vgpu-memory");
  const std::vector<std::string> compute_ids = DeviceIds("alnair/vgpu-compute");
  EXPECT_EQ(memory_ids.size(), 2u * 79);  // whole GiB of 81559 MiB
  EXPECT_EQ(compute_ids.size(), 200u);
  // What the kubelet does for the container: per resource, GetPreferredAllocation then Allocate.
  std::vector<std::string> memory;
  ASSERT_TRUE(kubelet_->Preferred("alnair/vgpu-memory", memory_ids, 2, &memory).ok());
  ASSERT_EQ(memory.size(), 2u);
  const std::string gpu = memory[0].substr(0, memory[0].rfind('_'));
  EXPECT_EQ(memory[1].substr(0, memory[1].rfind('_')), gpu) << "one container's memory units on one GPU";
  v1beta1::AllocateResponse memory_answer;
  ASSERT_TRUE(kubelet_->Allocate("alnair/vgpu-memory", {memory}, &memory_answer).ok());
  std::vector<std::string> compute;
  ASSERT_TRUE(kubelet_->Preferred("alnair/vgpu-compute", compute_ids, 50, &compute).ok());
  ASSERT_EQ(compute.size(), 50u);
  for (const auto& id : compute) EXPECT_EQ(id.substr(0, id.rfind('_')), gpu) << "compute units follow the memory's GPU";
  v1beta1::AllocateResponse compute_answer;
  grpc::Status status = kubelet_->Allocate("alnair/vgpu-compute", {compute}, &compute_answer);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // The container's environment: the kubelet merges both answers (first value wins).
  std::map<std::string, std::string> env = Envs(memory_answer);
  for (const auto& [name, value] : Envs(compute_answer)) env.insert({name, value});
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], gpu);
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "50");
  const std::string host_dir = Mounts(memory_answer)["/var/lib/vgpu/container"];
  EXPECT_EQ(Mounts(compute_answer)["/var/lib/vgpu/container"], host_dir);
  // The pod is unknown to a standalone grant, so its processes do not register with vgpu-node.
  EXPECT_EQ(Mounts(memory_answer).count("/var/lib/vgpu/vgpu.sock"), 0u);
  EXPECT_EQ(env.count("VGPU_SOCKET"), 0u);
  const std::string key = host_dir.substr(host_dir.rfind('/') + 1);
  ledger::LimitSet limits = LedgerLimits(key);
  ASSERT_EQ(limits.devices.size(), 1u);
  EXPECT_EQ(limits.devices[0].memory_limit, 2ull << 30);
  EXPECT_EQ(limits.devices[0].sm_limit, 50);
}

}  // namespace
}  // namespace vgpu::k8s
