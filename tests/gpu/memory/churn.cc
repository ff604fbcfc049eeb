// Real-GPU check of the group memory limit under multi-process churn (driver API, no nvcc).
//
//   churn --processes P --threads T --seconds S --kills K [--replace] [--max-mib M] [--seed N]
//
// The parent forks P children; every child creates its context (cuInit after the fork) and runs
// T threads that, for S seconds, allocate random sizes of 1..M MiB (most not multiples of the
// 2 MiB granule) with cuMemAlloc_v2 and free at random (an out-of-memory refusal frees one of the
// thread's own allocations instead). Midway the parent SIGKILLs K children at spread-out moments
// (with --replace a new child takes each one's place: a context created while the others fill the
// limit). Run it under libvgpu.so with one ledger for all (CUDA_DEVICE_MEMORY_LIMIT +
// CUDA_DEVICE_MEMORY_SHARED_CACHE) and watch the session from outside (nvml_peak.py, about every
// millisecond): the sum of NVML's per-process usage must never pass the limit.
//
// A child whose context does not fit the limit (CUDA_ERROR_OUT_OF_MEMORY at its creation, in a
// full container) tries again every 20 ms until the run ends, as a restarted worker would.
// Prints per child "child pid=... context_tries=... allocs=... frees=... refusals=... errors=...
// held_peak_mib=..." and one "result processes=... threads=... kills=... replace=... children=...
// errors=... hung=..." line. errors: CUDA calls that failed with anything but
// CUDA_ERROR_OUT_OF_MEMORY (children counted); hung: children that did not finish within S + 30 s
// (a stuck lock). Exit 0 when errors == 0 and hung == 0.
#include <cuda.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int processes = 8;
  int threads = 4;
  double seconds = 16;
  int kills = 3;
  bool replace = false;
  int max_mib = 256;
  unsigned seed = 1;
};

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Counters {
  std::atomic<long> allocs{0}, frees{0}, refusals{0}, errors{0};
  std::atomic<long long> held{0}, held_peak{0};
};

void Worker(CUcontext ctx, const Options& o, unsigned seed, double end, Counters* c) {
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    c->errors++;
    return;
  }
  std::mt19937_64 rng(seed);
  std::vector<std::pair<CUdeviceptr, size_t>> mine;
  auto free_one = [&]() {
    if (mine.empty()) return;
    size_t i = rng() % mine.size();
    if (cuMemFree_v2(mine[i].first) != CUDA_SUCCESS) c->errors++;
    c->held -= static_cast<long long>(mine[i].second);
    mine[i] = mine.back();
    mine.pop_back();
    c->frees++;
  };
  while (Now() < end) {
    if (!mine.empty() && rng() % 100 < 45) {
      free_one();
    } else {
      size_t bytes = (1 + rng() % o.max_mib) << 20;
      if (rng() % 100 < 80) bytes += 1 + rng() % ((2u << 20) - 1);  // not a multiple of 2 MiB
      CUdeviceptr p;
      CUresult r = cuMemAlloc_v2(&p, bytes);
      if (r == CUDA_SUCCESS) {
        mine.emplace_back(p, bytes);
        c->allocs++;
        long long now = c->held += static_cast<long long>(bytes);
        long long peak = c->held_peak.load();
        while (now > peak && !c->held_peak.compare_exchange_weak(peak, now)) {
        }
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        c->refusals++;
        free_one();
      } else {
        c->errors++;
      }
    }
    if (rng() % 4 == 0) usleep(static_cast<useconds_t>(rng() % 1000));
  }
  while (!mine.empty()) free_one();
}

int Child(const Options& o, unsigned seed, double end) {
  CUdevice dev;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
    fprintf(stderr, "churn child %d: no device\n", getpid());
    return 3;
  }
  int tries = 0;
  for (;;) {
    ++tries;
    const CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS) break;
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
      fprintf(stderr, "churn child %d: no context: %d\n", getpid(), static_cast<int>(r));
      return 3;
    }
    if (Now() >= end) {
      printf("child pid=%d context_tries=%d (never fitted)\n", getpid(), tries);
      return 0;
    }
    usleep(20000);
  }
  Counters c;
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(Worker, ctx, std::cref(o), seed * 131 + t, end, &c);
  for (auto& t : threads) t.join();
  printf("child pid=%d context_tries=%d allocs=%ld frees=%ld refusals=%ld errors=%ld held_peak_mib=%.1f\n", getpid(),
         tries, c.allocs.load(), c.frees.load(), c.refusals.load(), c.errors.load(), c.held_peak.load() / 1048576.0);
  fflush(stdout);
  return c.errors.load() == 0 ? 0 : 4;
}

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--replace") { o->replace = true; continue; }
    if (!(v = value())) return false;
    if (a == "--processes") o->processes = atoi(v);
    else if (a == "--threads") o->threads = atoi(v);
    else if (a == "--seconds") o->seconds = atof(v);
    else if (a == "--kills") o->kills = atoi(v);
    else if (a == "--max-mib") o->max_mib = atoi(v);
    else if (a == "--seed") o->seed = static_cast<unsigned>(atoi(v));
    else return false;
  }
  return o->processes >= 1 && o->processes <= 64 && o->threads >= 1 && o->seconds > 0 && o->kills >= 0 &&
         o->kills <= o->processes && o->max_mib >= 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, &o)) {
    fprintf(stderr, "usage: churn --processes P --threads T --seconds S --kills K [--replace] [--max-mib M] [--seed N]\n");
    return 2;
  }
  const double start = Now();
  const double end = start + o.seconds;
  std::vector<pid_t> children;
  auto spawn = [&](unsigned seed) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(Child(o, seed, end));
    children.push_back(pid);
  };
  for (int p = 0; p < o.processes; ++p) spawn(o.seed * 1000 + p);
  std::mt19937 rng(o.seed);
  std::vector<pid_t> killed;
  for (int k = 0; k < o.kills; ++k) {
    // Spread over the middle half of the run.
    const double at = start + o.seconds * (0.25 + 0.5 * (k + 0.5) / o.kills);
    while (Now() < at) usleep(1000);
    pid_t victim;
    do {
      victim = children[rng() % children.size()];
    } while (std::find(killed.begin(), killed.end(), victim) != killed.end());
    kill(victim, SIGKILL);
    killed.push_back(victim);
    printf("killed pid=%d at %.2f s\n", victim, Now() - start);
    if (o.replace) spawn(o.seed * 1000 + 100 + k);
  }
  int errors = 0, hung = 0;
  for (pid_t pid : children) {
    int status = 0;
    const double deadline = end + 30;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && Now() < deadline) usleep(10000);
    if (done == 0) {
      ++hung;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      continue;
    }
    const bool was_killed = std::find(killed.begin(), killed.end(), pid) != killed.end();
    if (!was_killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) ++errors;
  }
  printf("result processes=%d threads=%d kills=%d replace=%s children=%zu errors=%d hung=%d\n", o.processes,
         o.threads, o.kills, o.replace ? "yes" : "no", children.size(), errors, hung);
  return errors == 0 && hung == 0 ? 0 : 1;
}
