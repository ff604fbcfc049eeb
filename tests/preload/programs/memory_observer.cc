// The outside observer of the memory tests: what the (simulated) driver really holds, sampled
// from a process that does NOT have libvgpu.so preloaded, as nvidia-smi on the host would see it.
//
//   memory_observer <dir>
//
// Attaches to the simulated driver's shared state (same VGPU_SIM_* environment as the programs
// under test), creates <dir>/observer.ready, then samples every ~200 µs, per physical device, the
// memory used (nvmlDeviceGetMemoryInfo) and each process's usage
// (nvmlDeviceGetComputeRunningProcesses_v3), keeping the peaks. When a file <dir>/hold-<pid>-<label>
// appears (a program at a hold point, see memory_common.h) it takes a fresh snapshot, prints it
// and deletes the file, which lets the program continue. It stops after <dir>/observer.stop
// appears (one last sample first) or after 120 s, and prints:
//   peak device <d> used <bytes>   (the highest sample, or the simulated driver's own high-water
//                                   mark when higher: an overshoot between two samples counts)
//   peak device <d> pid <pid> used <bytes>
//   hold <holder-pid> <label> device <d> used <bytes>
//   hold <holder-pid> <label> device <d> pid <pid> used <bytes>
//   samples <n>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "memory_common.h"
#include "sim_nvml_types.h"

extern "C" unsigned long long vgpu_sim_memory_high_water(unsigned index);  // test-only sim export

namespace {

struct Sample {
  std::vector<unsigned long long> used;                             // per device
  std::vector<std::vector<std::pair<unsigned, unsigned long long>>> procs;  // per device
};

#define CHECK_NVML(expr) CHECK((expr) == NVML_SUCCESS)

Sample Take(const std::vector<nvmlDevice_t>& devices) {
  Sample s;
  s.used.resize(devices.size());
  s.procs.resize(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    nvmlMemory_t memory{};
    CHECK_NVML(nvmlDeviceGetMemoryInfo(devices[d], &memory));
    s.used[d] = memory.used;
    nvmlProcessInfo_t infos[256];
    unsigned count = 256;
    CHECK_NVML(nvmlDeviceGetComputeRunningProcesses_v3(devices[d], &count, infos));
    for (unsigned i = 0; i < count; ++i) s.procs[d].emplace_back(infos[i].pid, infos[i].usedGpuMemory);
  }
  return s;
}

void PrintSnapshot(const std::string& prefix, const Sample& s) {
  for (size_t d = 0; d < s.used.size(); ++d) {
    std::printf("%s device %zu used %llu\n", prefix.c_str(), d, s.used[d]);
    for (const auto& [pid, used] : s.procs[d]) {
      std::printf("%s device %zu pid %u used %llu\n", prefix.c_str(), d, pid, used);
    }
  }
}

// Hold files present now: names "hold-<pid>-<label>".
std::vector<std::string> HoldFiles(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "hold-", 5) == 0) names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memory_observer <dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  CHECK_NVML(nvmlInit_v2());
  unsigned count = 0;
  CHECK_NVML(nvmlDeviceGetCount_v2(&count));
  std::vector<nvmlDevice_t> devices(count);
  for (unsigned i = 0; i < count; ++i) CHECK_NVML(nvmlDeviceGetHandleByIndex_v2(i, &devices[i]));

  memtest::TouchFile(dir + "/observer.ready");
  std::vector<unsigned long long> peak(count, 0);
  std::map<std::pair<unsigned, unsigned>, unsigned long long> peak_pid;  // (device, pid)
  long samples = 0;
  const int64_t deadline = memtest::NowNs() + 120'000'000'000;
  for (;;) {
    const bool stop = memtest::FileExists(dir + "/observer.stop") || memtest::NowNs() > deadline;
    const Sample s = Take(devices);
    ++samples;
    for (unsigned d = 0; d < count; ++d) {
      peak[d] = std::max(peak[d], s.used[d]);
      for (const auto& [pid, used] : s.procs[d]) {
        auto& p = peak_pid[{d, pid}];
        p = std::max(p, used);
      }
    }
    for (const std::string& name : HoldFiles(dir)) {
      // "hold-<pid>-<label>" -> "hold <pid> <label>"
      std::string rest = name.substr(5);
      const size_t dash = rest.find('-');
      const std::string prefix =
          "hold " + rest.substr(0, dash) + " " + (dash == std::string::npos ? "" : rest.substr(dash + 1));
      PrintSnapshot(prefix, Take(devices));
      std::fflush(stdout);
      unlink((dir + "/" + name).c_str());
    }
    if (stop) break;
    usleep(200);
  }
  for (unsigned d = 0; d < count; ++d) {
    std::printf("peak device %u used %llu\n", d, std::max(peak[d], vgpu_sim_memory_high_water(d)));
  }
  for (const auto& [key, used] : peak_pid) {
    std::printf("peak device %u pid %u used %llu\n", key.first, key.second, used);
  }
  std::printf("samples %ld\n", samples);
  CHECK_NVML(nvmlShutdown());
  return 0;
}
