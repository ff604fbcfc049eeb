#include "memory_harness.h"

#include <stdlib.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace vgpu::testing {
namespace {

std::string Program(const std::string& name) { return std::string(VGPU_TEST_PROGRAM_DIR) + "/" + name; }

}  // namespace

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") + "\n--- stdout\n" + r.out +
         "--- stderr\n" + r.err;
}

std::string MiB(uint64_t bytes) {
  std::ostringstream s;
  s << bytes / static_cast<double>(kMiB) << " MiB";
  return s.str();
}

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

Transcript::Transcript(const RunResult& run) : run_(run) {
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    values_.emplace(line.substr(0, space), line.substr(space + 1));
  }
}

std::string Transcript::Text(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    ADD_FAILURE() << "the program did not report \"" << key << "\"\n" << Describe(run_);
    return "";
  }
  return it->second;
}

uint64_t Transcript::U64(const std::string& key) const {
  const std::string text = Text(key);
  return text.empty() ? 0 : std::stoull(text);
}

std::vector<uint64_t> Transcript::All(const std::string& key) const {
  std::vector<uint64_t> out;
  auto [begin, end] = values_.equal_range(key);
  for (auto it = begin; it != end; ++it) out.push_back(std::stoull(it->second));
  return out;
}

std::map<std::string, std::string> Transcript::Codes() const {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : values_) {
    if (k.rfind("code_", 0) == 0) out[k] = v;
  }
  return out;
}

uint64_t Observation::Peak(int device) const {
  auto it = peak_device.find(device);
  return it == peak_device.end() ? 0 : it->second;
}

const Observation::Hold* Observation::FindHold(const std::string& label) const {
  for (const Hold& h : holds) {
    if (h.label == label) return &h;
  }
  return nullptr;
}

uint64_t Observation::HoldUsed(const std::string& label, int device) const {
  const Hold* h = FindHold(label);
  if (h == nullptr) {
    ADD_FAILURE() << "no hold point \"" << label << "\" was observed\n" << Describe(run);
    return 0;
  }
  auto it = h->device_used.find(device);
  return it == h->device_used.end() ? 0 : it->second;
}

Observation ParseObservation(const RunResult& run) {
  Observation obs;
  obs.run = run;
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string word; in >> word;) w.push_back(word);
    if (w.size() == 5 && w[0] == "peak" && w[1] == "device" && w[3] == "used") {
      obs.peak_device[std::stoi(w[2])] = std::stoull(w[4]);
    } else if (w.size() >= 7 && w[0] == "hold") {
      const int holder = std::stoi(w[1]);
      Observation::Hold* hold = nullptr;
      for (auto& h : obs.holds) {
        if (h.holder_pid == holder && h.label == w[2]) hold = &h;
      }
      if (hold == nullptr) {
        obs.holds.push_back({holder, w[2], {}, {}});
        hold = &obs.holds.back();
      }
      if (w.size() == 7 && w[3] == "device" && w[5] == "used") {
        hold->device_used[std::stoi(w[4])] = std::stoull(w[6]);
      } else if (w.size() == 9 && w[3] == "device" && w[5] == "pid" && w[7] == "used") {
        hold->pid_used[{std::stoi(w[4]), std::stoi(w[6])}] = std::stoull(w[8]);
      }
    } else if (w.size() == 2 && w[0] == "samples") {
      obs.samples = std::stol(w[1]);
    }
  }
  return obs;
}

void MemoryTest::SetUp() {
  std::string tmpl = ::testing::TempDir() + "vgpu-memtest-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
}

void MemoryTest::TearDown() {
  if (observer_.joinable()) StopObserver();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Env MemoryTest::SimEnv() const {
  Env env = {{"LD_LIBRARY_PATH", VGPU_SIM_DIR}, {"PATH", "/usr/bin:/bin"}, {"VGPU_SIM_STATE", dir_ + "/sim.state"}};
  for (const auto& [k, v] : sim_) env[k] = v;
  return env;
}

Env MemoryTest::VgpuEnv(const Env& limits) const {
  Env env = SimEnv();
  env["LD_PRELOAD"] = VGPU_LIBRARY_PATH;
  env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = dir_ + "/ledger";
  env["VGPU_BOARD"] = dir_ + "/board";  // the test's own node-wide board (priorities)
  if (observer_.joinable()) env["MEMTEST_HOLD_DIR"] = dir_;
  // Exact arithmetic by default: the tests of the headroom set VGPU_MEMORY_HEADROOM themselves.
  env["VGPU_MEMORY_HEADROOM"] = "0";
  for (const auto& [k, v] : limits) env[k] = v;
  return env;
}

RunResult MemoryTest::Run(const std::vector<std::string>& argv, const Env& env, int timeout_seconds) const {
  std::vector<std::string> full = argv;
  full[0] = Program(argv[0]);
  return RunProgram(full, env, timeout_seconds);
}

void MemoryTest::StartObserver() {
  ASSERT_FALSE(observer_.joinable());
  std::filesystem::remove(dir_ + "/observer.ready");
  std::filesystem::remove(dir_ + "/observer.stop");
  observer_ = std::thread([this, env = SimEnv()] {
    observer_run_ = RunProgram({Program("memory_observer"), dir_}, env, 150);
  });
  const int64_t deadline = NowMs() + 10'000;
  while (!std::filesystem::exists(dir_ + "/observer.ready")) {
    if (NowMs() > deadline) {
      StopObserver();
      FAIL() << "the observer did not start\n" << Describe(observer_run_);
    }
    SleepMs(1);
  }
}

Observation MemoryTest::StopObserver() {
  std::ofstream(dir_ + "/observer.stop").flush();
  observer_.join();
  EXPECT_EQ(observer_run_.exit_code, 0) << "observer: " << Describe(observer_run_);
  Observation obs = ParseObservation(observer_run_);
  EXPECT_GT(obs.samples, 0);
  return obs;
}

pid_t MemoryTest::StartHolder(uint64_t mib, uint64_t chunk_mib, const Env& env, std::thread* thread,
                              RunResult* result, bool retry) {
  const std::string ready = dir_ + "/holder.pid";
  std::filesystem::remove(ready);
  *thread = std::thread([this, mib, chunk_mib, env, ready, result, retry] {
    *result = Run({"memory_procs", retry ? "hold_when_free" : "hold", std::to_string(mib), std::to_string(chunk_mib),
                   ready},
                  env);
  });
  const int64_t deadline = NowMs() + 10'000;
  while (!std::filesystem::exists(ready) && NowMs() < deadline) SleepMs(2);
  pid_t pid = 0;
  if (std::filesystem::exists(ready)) std::ifstream(ready) >> pid;
  if (pid <= 0) {
    thread->join();
    return 0;
  }
  return pid;
}

MemoryTest::ObservedRun MemoryTest::RunObserved(const std::vector<std::string>& argv, const Env& limits) {
  StartObserver();
  ObservedRun observed;
  observed.run = Run(argv, VgpuEnv(limits));
  observed.obs = StopObserver();
  return observed;
}

}  // namespace vgpu::testing
