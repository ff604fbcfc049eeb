// vgpu-node with real processes on the simulated driver (tests/simdriver), real /proc and the
// test's own cgroup as the limited group:
//   - a program under libvgpu.so registers, charges the ledger the daemon created, and /metrics
//     shows its memory against the limit;
//   - the library's policy when the daemon is absent, silent, or refuses;
//   - a GPU program started without the library inside the group is flagged (and killed with
//     bypass_action = kill);
//   - NVML XID events make a GPU unhealthy and it recovers;
//   - /metrics parses with Prometheus' Python parser (prometheus_client), host spill included;
//   - an NVML-only process registers at nvmlInit;
//   - the daemon's ledger is the authority: no limits in the environment is not a disagreement.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "daemon_harness.h"
#include "ledger/ledger.h"
#include "node/container_store.h"

namespace vgpu::node::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
const std::string kUuid0 = "GPU-5151a000-0000-4000-8000-000000000000";

class NodeIntegrationTest : public ::testing::Test {
 protected:
  NodeIntegrationTest() {
    MakeDirs(state());
    WriteFile(events(), "");
  }
  ~NodeIntegrationTest() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  std::string state() const { return dir_.path() + "/state"; }
  std::string events() const { return dir_.path() + "/nvml-events"; }
  std::string sim_state() const { return dir_.path() + "/sim-state"; }
  std::string ledger_path() const { return state() + "/containers/job_main/ledger"; }

  void AddGroup(uint64_t memory = 1ull << 30, uint64_t host_spill = 0) {
    ContainerStore store(state() + "/containers");
    ASSERT_TRUE(store.Init().ok);
    ContainerSpec s;
    s.pod_uid = "job";
    s.container_name = "main";
    s.ns = "batch";
    s.pod_name = "trainer";
    s.cgroup = OwnCgroup();  // every process this test starts lives here
    s.limits.default_memory_limit = memory;
    s.limits.default_host_limit = host_spill;
    ASSERT_FALSE(s.cgroup.empty());
    ASSERT_TRUE(store.Ensure(s, nullptr).ok);
  }

  std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> extra = {}) {
    extra.push_back(std::string("--nvml-library=") + VGPU_SIM_DIR + "/libnvidia-ml.so.1");
    extra.push_back("--scan-interval=100ms");
    extra.push_back("--bypass-grace=200ms");
    auto d = std::make_unique<DaemonProcess>(state(), extra,
                                             std::map<std::string, std::string>{{"VGPU_SIM_STATE", sim_state()},
                                                                                {"VGPU_SIM_NVML_EVENTS", events()}});
    EXPECT_TRUE(d->Start()) << d->log();
    return d;
  }

  std::map<std::string, std::string> SimEnv() const {
    return {{"LD_LIBRARY_PATH", VGPU_SIM_DIR}, {"VGPU_SIM_STATE", sim_state()}};
  }

  std::map<std::string, std::string> LibraryEnv(const std::string& socket) const {
    auto env = SimEnv();
    env["LD_PRELOAD"] = VGPU_LIBRARY_PATH;
    env["VGPU_SOCKET"] = socket;
    env["VGPU_POD_UID"] = "job";
    env["VGPU_CONTAINER_NAME"] = "main";
    env["LIBCUDA_LOG_LEVEL"] = "3";
    return env;
  }

  // memory_procs hold: allocates `mib`, writes its pid to a ready file, sleeps (<= 30 s).
  pid_t Hold(const std::string& name, uint64_t mib, const std::map<std::string, std::string>& env) {
    const std::string ready = dir_.path() + "/" + name + ".ready";
    const pid_t pid = Spawn({VGPU_MEMORY_PROCS, "hold", std::to_string(mib), "64", ready}, env, dir_.path() + "/" + name);
    children_.push_back(pid);
    EXPECT_TRUE(WaitFor(10000, [&] { return !ReadFile(ready).empty(); })) << Output(name);
    return pid;
  }

  std::string Output(const std::string& name) const {
    return "stdout:\n" + ReadFile(dir_.path() + "/" + name + ".out") + "stderr:\n" + ReadFile(dir_.path() + "/" + name + ".err");
  }

  // Runs `memory_procs hold 64` and waits for it to either hold (then kills it: 0) or exit.
  int RunBriefly(const std::string& name, const std::map<std::string, std::string>& env, int64_t* elapsed_ms = nullptr) {
    const std::string ready = dir_.path() + "/" + name + ".ready";
    const int64_t start = wire::MonotonicNs();
    const pid_t pid = Spawn({VGPU_MEMORY_PROCS, "hold", "64", "64", ready}, env, dir_.path() + "/" + name);
    int status = -1;
    WaitFor(15000, [&] {
      if (!ReadFile(ready).empty()) {
        status = 0;
        return true;
      }
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      }
      return false;
    });
    if (elapsed_ms != nullptr) *elapsed_ms = (wire::MonotonicNs() - start) / 1'000'000;
    if (status == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    return status;
  }

  std::string HamiLabels() const {
    return "{namespace=\"batch\",pod=\"trainer\",container=\"main\",vdevice_index=\"0\",device_uuid=\"" + kUuid0 + "\"}";
  }
  std::string ContainerLabels() const { return "{pod_uid=\"job\",namespace=\"batch\",pod=\"trainer\",container=\"main\"}"; }

  TempDir dir_;
  std::vector<pid_t> children_;
};

TEST_F(NodeIntegrationTest, ALibraryProcessRegistersAndItsMemoryShowsInTheMetrics) {
  AddGroup();
  auto daemon = StartDaemon();
  // No CUDA_DEVICE_MEMORY_SHARED_CACHE: the ledger path comes from the daemon's answer.
  const pid_t pid = Hold("registered", 256, LibraryEnv(daemon->socket()));
  EXPECT_NE(ReadFile(dir_.path() + "/registered.err").find("registered with vgpu-node as container job_main: host pid " + std::to_string(pid)),
            std::string::npos)
      << Output("registered");

  // The ledger the daemon created has the process, with the host pid the daemon answered.
  ledger::LedgerStatus status;
  auto ledger = ledger::Ledger::OpenReadOnly(ledger_path(), &status);
  ASSERT_NE(ledger, nullptr) << status.message;
  const ledger::Snapshot snapshot = ledger->Read();
  ASSERT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.processes[0].host_pid, pid);
  EXPECT_EQ(snapshot.authority, ledger::Authority::kNodeDaemon);

  // Charged memory (256 MiB + the simulated 256 MiB context) is in the next scrape.
  const std::string metrics = daemon->Metrics();
  EXPECT_GE(MetricValue(metrics, "hami_vgpu_memory_used_bytes" + HamiLabels()), 512.0 * kMiB) << metrics;
  EXPECT_EQ(MetricValue(metrics, "hami_vgpu_memory_limit_bytes" + HamiLabels()), 1024.0 * kMiB);
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_registered_processes" + ContainerLabels()), 1);
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_processes" + ContainerLabels()), 1);
  EXPECT_GE(MetricValue(metrics, "hami_host_gpu_memory_used_bytes{node="), 512.0 * kMiB);
  // NVML's own count for the process matches what the ledger holds.
  const std::string labels = "{pod_uid=\"job\",namespace=\"batch\",pod=\"trainer\",container=\"main\",device_index=\"0\",device_uuid=\"" + kUuid0 + "\"}";
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_memory_nvml_bytes" + labels), MetricValue(metrics, "vgpu_container_memory_used_bytes" + labels));
  // And nothing is flagged.
  usleep(600000);
  EXPECT_EQ(MetricValue(daemon->Metrics(), "vgpu_bypass_processes{node="), 0);
}

TEST_F(NodeIntegrationTest, LibraryPolicyWithoutADaemon) {
  AddGroup();
  auto daemon = StartDaemon();
  auto env = LibraryEnv(daemon->socket());

  // VGPU_SOCKET unset: no registration at all (and no ledger from the daemon: a memory limit
  // in the environment makes the library use its own default ledger).
  auto unset = env;
  unset.erase("VGPU_SOCKET");
  unset["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = dir_.path() + "/own/ledger";
  unset["CUDA_DEVICE_MEMORY_LIMIT"] = "1g";
  EXPECT_EQ(RunBriefly("unset", unset), 0) << Output("unset");
  EXPECT_EQ(ReadFile(dir_.path() + "/unset.err").find("registration"), std::string::npos) << Output("unset");
  EXPECT_EQ(ReadFile(dir_.path() + "/unset.err").find("registered with"), std::string::npos) << Output("unset");

  // Set but nothing there: a warning, and the process continues.
  auto absent = unset;
  absent["VGPU_SOCKET"] = dir_.path() + "/no-daemon.sock";
  EXPECT_EQ(RunBriefly("absent", absent), 0) << Output("absent");
  EXPECT_NE(ReadFile(dir_.path() + "/absent.err").find("warning: registration with vgpu-node failed"), std::string::npos)
      << Output("absent");

  // ... unless registration is required: cuInit is refused.
  auto required = absent;
  required["VGPU_REGISTRATION_REQUIRED"] = "true";
  EXPECT_NE(RunBriefly("required", required), 0);
  EXPECT_NE(ReadFile(dir_.path() + "/required.err").find("cuInit refused"), std::string::npos) << Output("required");

  // A daemon that accepts and never answers costs the timeout, not a hang.
  const std::string hole = dir_.path() + "/hole.sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", hole.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);  // connections wait in the backlog; nobody reads
  auto silent = unset;
  silent["VGPU_SOCKET"] = hole;
  silent["VGPU_REGISTRATION_TIMEOUT_MS"] = "300";
  int64_t elapsed_ms = 0;
  EXPECT_EQ(RunBriefly("silent", silent, &elapsed_ms), 0) << Output("silent");
  EXPECT_NE(ReadFile(dir_.path() + "/silent.err").find("no reply within the timeout"), std::string::npos) << Output("silent");
  EXPECT_LT(elapsed_ms, 8000);
  close(fd);

  // The daemon refuses a claim it cannot verify: always fatal.
  auto wrong = env;
  wrong["VGPU_CONTAINER_NAME"] = "other";
  EXPECT_NE(RunBriefly("wrong", wrong), 0);
  EXPECT_NE(ReadFile(dir_.path() + "/wrong.err").find("vgpu-node refused the registration"), std::string::npos) << Output("wrong");
  EXPECT_NE(ReadFile(dir_.path() + "/wrong.err").find("no limited container job_other"), std::string::npos) << Output("wrong");
}

TEST_F(NodeIntegrationTest, AGpuProcessWithoutTheLibraryIsFlagged) {
  AddGroup();
  auto daemon = StartDaemon();
  const pid_t good = Hold("registered", 64, LibraryEnv(daemon->socket()));
  const pid_t rogue = Hold("rogue", 128, SimEnv());  // no LD_PRELOAD: invisible to the ledger
  ASSERT_TRUE(WaitFor(5000, [&] { return MetricValue(daemon->Metrics(), "vgpu_bypass_processes{node=") == 1; })) << daemon->log();
  const std::string metrics = daemon->Metrics();
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_bypass_processes" + ContainerLabels()), 1);
  EXPECT_EQ(MetricValue(metrics, "vgpu_bypass_process_info{host_pid=\"" + std::to_string(rogue) + "\""), 384.0 * kMiB);
  EXPECT_EQ(MetricValue(metrics, "vgpu_bypass_detections_total"), 1);
  const std::string log = daemon->log();
  EXPECT_NE(log.find("GPU process in a limited container is not accounted by vgpu\" host_pid=" + std::to_string(rogue)), std::string::npos) << log;
  EXPECT_EQ(log.find("host_pid=" + std::to_string(good) + " comm"), std::string::npos);
  // Report only: the process still runs.
  EXPECT_EQ(kill(rogue, 0), 0);
}

TEST_F(NodeIntegrationTest, TheKillPolicyKillsABypassingProcess) {
  AddGroup();
  auto daemon = StartDaemon({"--bypass-action=kill"});
  const pid_t good = Hold("registered", 64, LibraryEnv(daemon->socket()));
  const pid_t rogue = Hold("rogue", 64, SimEnv());
  EXPECT_EQ(WaitExit(rogue, 5000), 128 + SIGKILL) << daemon->log();
  EXPECT_EQ(kill(good, 0), 0);  // the registered one is untouched
  EXPECT_TRUE(WaitFor(2000, [&] { return MetricValue(daemon->Metrics(), "vgpu_bypass_kills_total") == 1; }));
  EXPECT_NE(daemon->log().find("msg=killed host_pid=" + std::to_string(rogue)), std::string::npos);
}

TEST_F(NodeIntegrationTest, XidEventsMakeAGpuUnhealthyAndItRecovers) {
  AddGroup();
  auto daemon = StartDaemon({"--health-recovery=1s"});
  const std::string healthy = "vgpu_gpu_healthy{node=";
  EXPECT_EQ(MetricValue(daemon->Metrics(), healthy), 1);
  std::ofstream(events(), std::ios::app) << "0 xid 13\n";  // an application error: ignored
  ASSERT_TRUE(WaitFor(3000, [&] {
    return MetricValue(daemon->Metrics(), "vgpu_gpu_xid_errors_total{node=\"") >= 1;
  })) << daemon->log();
  EXPECT_EQ(MetricValue(daemon->Metrics(), healthy), 1);
  std::ofstream(events(), std::ios::app) << "0 xid 79\n";
  ASSERT_TRUE(WaitFor(3000, [&] { return MetricValue(daemon->Metrics(), healthy) == 0; })) << daemon->log();
  EXPECT_NE(daemon->log().find("kind=xid data=79 now_unhealthy=true"), std::string::npos);
  // No new critical event for 1 s and the GPU answers: healthy again.
  ASSERT_TRUE(WaitFor(5000, [&] { return MetricValue(daemon->Metrics(), healthy) == 1; })) << daemon->log();
  EXPECT_NE(daemon->log().find("msg=\"GPU recovered\""), std::string::npos);
  EXPECT_EQ(MetricValue(daemon->Metrics(), "vgpu_gpu_health_transitions_total{node="), 2);
}

// A stop waits for every thread of the daemon, the health thread in its wait for NVML's events
// among them: none may sleep long between looks at it (the kubelet and systemd give a stop
// seconds; the Kubernetes modes' own stop adds to this).
// Stopped at three points of those waits (DaemonProcess::Terminate looks every 50 ms): with the
// health thread's 500 ms waits the stops took up to ~450 ms.
TEST_F(NodeIntegrationTest, SigtermStopsTheDaemonWithinAQuarterOfASecond) {
  AddGroup();
  for (int pause_ms : {50, 200, 350}) {
    auto daemon = StartDaemon();
    ASSERT_TRUE(daemon->Running()) << daemon->log();
    usleep(pause_ms * 1000);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(daemon->Terminate(), 0) << daemon->log();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ stop ] %.0f ms from SIGTERM to exit (%d ms after the start)\n", ms, pause_ms);
    EXPECT_LT(ms, 250) << daemon->log();
  }
}

TEST_F(NodeIntegrationTest, PsAndTopWorkNodeWideThroughTheDaemon) {
  AddGroup();
  auto daemon = StartDaemon();
  const pid_t good = Hold("registered", 128, LibraryEnv(daemon->socket()));
  const pid_t rogue = Hold("rogue", 64, SimEnv());
  ASSERT_TRUE(WaitFor(5000, [&] { return MetricValue(daemon->Metrics(), "vgpu_bypass_processes{node=") == 1; }));

  const std::string ps = dir_.path() + "/ps";
  // Node-wide also lists the ledgers found locally (/tmp/vgpu-<uid>/...), which on a shared test
  // machine may be unreadable leftovers: exit status 1 then; the daemon's part is what we check.
  const int ps_status = WaitExit(Spawn({VGPU_CLI_EXE, "ps", "--socket", daemon->socket()}, {{"HOME", dir_.path()}}, ps), 10000);
  ASSERT_TRUE(ps_status == 0 || ps_status == 1) << ReadFile(ps + ".out") << ReadFile(ps + ".err");
  const std::string out = ReadFile(ps + ".out");
  EXPECT_NE(out.find(ledger_path() + "  [container batch/trainer/main (pod uid job), 1 registered]"), std::string::npos) << out;
  // The registered process, judged alive by its host pid: "  <pid>  <host pid>  running  128 MiB + 256 MiB".
  const size_t row = out.find("\n  " + std::to_string(good) + " ");
  ASSERT_NE(row, std::string::npos) << out;
  EXPECT_NE(out.substr(row, out.find('\n', row + 1) - row).find(" running  128 MiB + 256 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("Simulated GPU (vgpu test double)"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU processes in limited containers that bypass vgpu"), std::string::npos) << out;
  EXPECT_NE(out.find("  " + std::to_string(rogue) + " "), std::string::npos) << out;
  EXPECT_NE(out.find(" memory_procs  job_main   " + kUuid0 + "  320 MiB"), std::string::npos) << out;

  const std::string json = dir_.path() + "/psjson";
  WaitExit(Spawn({VGPU_CLI_EXE, "ps", "--json", "--socket", daemon->socket()}, {}, json), 10000);
  EXPECT_NE(ReadFile(json + ".out").find("\"bypass\": [{\"host_pid\": " + std::to_string(rogue)), std::string::npos) << ReadFile(json + ".out");

  const std::string top = dir_.path() + "/top";
  const int top_status = WaitExit(Spawn({VGPU_CLI_EXE, "top", "--once", "--socket", daemon->socket()}, {}, top), 10000);
  ASSERT_TRUE(top_status == 0 || top_status == 1) << ReadFile(top + ".err");
  const std::string frame = ReadFile(top + ".out");
  EXPECT_NE(frame.find("vgpu top - node "), std::string::npos) << frame;
  EXPECT_NE(frame.find("batch/trainer/main  0 GPU-5151a000  384 MiB / 1 GiB (37.5%)"), std::string::npos) << frame;
  EXPECT_NE(frame.find("BYPASS: host pid " + std::to_string(rogue) + " (memory_procs) in job_main"), std::string::npos) << frame;

  // Without a daemon: the local view, and a note on stderr when the socket exists but is dead.
  const std::string dead = dir_.path() + "/dead";
  const int dead_status = WaitExit(Spawn({VGPU_CLI_EXE, "ps", "--socket", dir_.path() + "/none.sock"}, {}, dead), 10000);
  ASSERT_TRUE(dead_status == 0 || dead_status == 1);
  EXPECT_EQ(ReadFile(dead + ".out").find("[container"), std::string::npos);
}

TEST_F(NodeIntegrationTest, AnNvmlOnlyProcessRegistersAtNvmlInit) {
  AddGroup();
  auto daemon = StartDaemon();
  const std::string probe = dir_.path() + "/probe";
  ASSERT_EQ(WaitExit(Spawn({VGPU_NVML_PROBE}, LibraryEnv(daemon->socket()), probe), 10000), 0)
      << ReadFile(probe + ".out") << ReadFile(probe + ".err");
  EXPECT_NE(ReadFile(probe + ".err").find("registered with vgpu-node as container job_main"), std::string::npos)
      << ReadFile(probe + ".err");
  EXPECT_EQ(MetricValue(daemon->Metrics(), "vgpu_registrations_total{result=\"ok\"}"), 1);
  // Its NVML view is the container's: the daemon's ledger, without limits in the environment.
  EXPECT_NE(ReadFile(probe + ".out").find("total 1073741824\n"), std::string::npos) << ReadFile(probe + ".out");

  // A claim the daemon refuses refuses NVML too (NVML_ERROR_NO_PERMISSION = 4).
  auto wrong = LibraryEnv(daemon->socket());
  wrong["VGPU_CONTAINER_NAME"] = "other";
  const std::string refused = dir_.path() + "/refused";
  EXPECT_EQ(WaitExit(Spawn({VGPU_NVML_PROBE}, wrong, refused), 10000), 1);
  EXPECT_NE(ReadFile(refused + ".out").find("init 4\n"), std::string::npos) << ReadFile(refused + ".out");
  EXPECT_NE(ReadFile(refused + ".err").find("nvmlInit refused: vgpu-node refused the registration"), std::string::npos)
      << ReadFile(refused + ".err");
  EXPECT_EQ(MetricValue(daemon->Metrics(), "vgpu_registrations_total{result=\"refused\"}"), 1);
}

TEST_F(NodeIntegrationTest, TheDaemonsLedgerNeedsNoLimitsInTheEnvironment) {
  AddGroup();
  auto daemon = StartDaemon();
  // The Kubernetes case without limit variables: the ledger's limits apply, nothing is wrong.
  Hold("registered", 64, LibraryEnv(daemon->socket()));
  const std::string quiet = ReadFile(dir_.path() + "/registered.err");
  EXPECT_EQ(quiet.find("holds other limits"), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("ERROR"), std::string::npos) << quiet;
  EXPECT_NE(quiet.find("the environment sets no limits: the limits of ledger " + ledger_path() + " apply"), std::string::npos)
      << quiet;
  // Limits stated in the environment that differ from the daemon's are still reported.
  auto other = LibraryEnv(daemon->socket());
  other["CUDA_DEVICE_MEMORY_LIMIT"] = "2g";
  EXPECT_EQ(RunBriefly("other", other), 0) << Output("other");
  EXPECT_NE(ReadFile(dir_.path() + "/other.err").find("holds other limits than this process's environment"), std::string::npos)
      << Output("other");
}

std::string FindPython() {
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    const std::string command = std::string(candidate) + " -c 'import prometheus_client' 2>/dev/null";
    if (system(command.c_str()) == 0) return candidate;
  }
  return "";
}

TEST_F(NodeIntegrationTest, MetricsParseWithPrometheusClient) {
  const std::string python = FindPython();
  ASSERT_FALSE(python.empty()) << "no python3 with prometheus_client: install python3-prometheus-client (scripts/install-deps.sh)";
  AddGroup(1ull << 30, 512 * kMiB);  // oversubscription: 512 MiB may spill to the host
  auto daemon = StartDaemon();
  // Fills the device up to the limit less its headroom (256 MiB context + 10 x 64 MiB; the
  // default headroom of a 1 GiB limit is 128 MiB), spills 8 x 64 MiB, is refused once at the
  // host limit, then waits.
  const std::string sync = dir_.path() + "/sync";
  MakeDirs(sync);
  children_.push_back(Spawn({VGPU_MEMORY_SPILL, "fill", "alloc", "64", "2048", sync}, LibraryEnv(daemon->socket()),
                            dir_.path() + "/registered"));
  ASSERT_TRUE(WaitFor(15000, [&] { return access((sync + "/full").c_str(), F_OK) == 0; }))
      << Output("registered");
  Hold("rogue", 64, SimEnv());
  ASSERT_TRUE(WaitFor(5000, [&] { return MetricValue(daemon->Metrics(), "vgpu_bypass_processes{node=") == 1; }));
  const std::string scrape = dir_.path() + "/metrics.txt";
  WriteFile(scrape, daemon->Metrics());
  const std::string checks = dir_.path() + "/checks.txt";
  WriteFile(checks,
            "family hami_vgpu_memory_used_bytes gauge\n"
            "family hami_vgpu_memory_limit_bytes gauge\n"
            "family hami_host_gpu_memory_used_bytes gauge\n"
            "family hami_host_gpu_utilization_ratio gauge\n"
            "family hami_container_device_utilization_ratio gauge\n"
            "family vgpu_container_memory_used_bytes gauge\n"
            "family vgpu_container_compute_share_ratio gauge\n"
            "family vgpu_container_throttled_seconds_total counter\n"
            "family vgpu_container_oom_refusals_total counter\n"
            "family vgpu_registration_duration_seconds histogram\n"
            "family vgpu_bypass_processes gauge\n"
            "family vgpu_gpu_healthy gauge\n"
            "family vgpu_container_spill_used_bytes gauge\n"
            "family vgpu_container_spill_limit_bytes gauge\n"
            "family vgpu_container_spill_peak_bytes gauge\n"
            "family vgpu_container_spill_refusals_total counter\n"
            "sample vgpu_container_spill_used_bytes pod_uid=job,device_uuid=" + kUuid0 + " == 536870912\n"
            "sample vgpu_container_spill_limit_bytes pod_uid=job,device_uuid=" + kUuid0 + " == 536870912\n"
            "sample vgpu_container_spill_peak_bytes pod_uid=job,device_uuid=" + kUuid0 + " == 536870912\n"
            "sample vgpu_container_spill_refusals_total pod_uid=job,device_uuid=" + kUuid0 + " == 1\n"
            "sample vgpu_container_memory_used_bytes pod_uid=job,device_uuid=" + kUuid0 + " == 939524096\n"
            "sample hami_vgpu_memory_used_bytes namespace=batch,pod=trainer,container=main,device_uuid=" + kUuid0 + " >= 402653184\n"
            "sample hami_vgpu_memory_limit_bytes namespace=batch,pod=trainer,container=main == 1073741824\n"
            "sample vgpu_container_registered_processes pod_uid=job == 1\n"
            "sample vgpu_bypass_processes - == 1\n"
            "sample vgpu_registrations_total result=ok == 1\n"
            "sample vgpu_registration_duration_seconds_count - == 1\n"
            "sample vgpu_gpu_memory_total_bytes device_uuid=" + kUuid0 + " == 17179869184\n");
  const std::string command = python + " " + VGPU_PARSE_METRICS + " " + scrape + " " + checks + " > " + dir_.path() + "/parse.out 2>&1";
  const int rc = system(command.c_str());
  EXPECT_EQ(rc, 0) << ReadFile(dir_.path() + "/parse.out") << "\n" << ReadFile(scrape);
}

}  // namespace
}  // namespace vgpu::node::testing
