// Several processes and threads on one ledger, and processes that die holding memory.
//
//   memory_procs share <dir> <nprocs> <chunk_mib>
//       N copies run at once: each creates its context, waits for all (barrier files in <dir>),
//       allocates chunks until refused, waits for all again, stops at hold point "full",
//       waits for every hold to be taken, and frees.
//   memory_procs threads <nthreads> <chunk_mib>
//       the same with threads of one process (all start together).
//   memory_procs churn <dir> <nprocs> <nthreads> <chunk_mib> <ms>
//       N copies x T threads allocate and free chunks at random for <ms> (each thread holds at
//       most 3); counts successes, refusals (CUDA_ERROR_OUT_OF_MEMORY) and other errors. All
//       copies finish (barrier) before any exits.
//   memory_procs hold <total_mib> <chunk_mib> <ready_file>
//       allocates <total_mib> in chunks (all must succeed), writes its pid to <ready_file> and
//       sleeps until killed (at most 30 s).
//   memory_procs hold_when_free <total_mib> <chunk_mib> <ready_file>
//       the same, but a refused chunk is tried again every 5 ms (for up to 10 s in all): for
//       tests where another process may take the room for a while.
//   memory_procs linger <dir> <ms>
//       creates its context, touches <dir>/linger-ready, waits for <dir>/go and exits; an exit
//       handler registered before CUDA was touched keeps the process alive <ms> longer.
//   memory_procs leak <total_mib> <chunk_mib>
//       allocates <total_mib> in chunks and exits without freeing anything.
//   memory_procs reclaim <mib> <timeout_ms>
//       tries one <mib> allocation every 5 ms until it succeeds or <timeout_ms> passes;
//       reports "obtained 0|1", "elapsed_ms", "attempts", "last_code".
//   memory_procs graph_race <graph_mib> <chunk_mib> <delay_ms>
//       after one stream-ordered allocation (freed), one thread builds a graph whose allocation
//       node asks for <graph_mib>, instantiates it
//       (slowly under VGPU_SIM_GRAPH_INSTANTIATE_MS) and launches it; another thread starts
//       <delay_ms> later and allocates chunks until refused. Reports "graph_code" (the graph's
//       first failing call, 0 if it ran), "graph_refused_at" (build, instantiate, launch or
//       never), "count", "obtained", "refusal_code"; stops at hold point "full" holding both.
//   memory_procs zombie <child_mib> <parent_mib> <timeout_ms>
//       forks a child that allocates <child_mib> and waits; the parent checks that <parent_mib>
//       is refused while the child lives, SIGKILLs it WITHOUT reaping it (it stays a zombie),
//       then retries like "reclaim"; reaps the child at the end.
#include <cuda.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memory_common.h"

namespace {

using memtest::ArgU64;
using memtest::kMiB;
using memtest::Report;

struct FillResult {
  std::vector<CUdeviceptr> held;
  CUresult refusal = CUDA_SUCCESS;
};

FillResult Fill(uint64_t chunk) {
  FillResult r;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUdeviceptr p = 0;
    r.refusal = cuMemAlloc(&p, chunk);
    if (r.refusal != CUDA_SUCCESS) break;
    r.held.push_back(p);
  }
  return r;
}

void FreeAll(const std::vector<CUdeviceptr>& held) {
  for (CUdeviceptr p : held) CHECK_CU(cuMemFree(p));
}

int Share(const std::string& dir, int nprocs, uint64_t chunk) {
  memtest::InitPrimaryContext(0);
  memtest::Barrier(dir, "ready-", nprocs);
  FillResult r = Fill(chunk);
  Report("count", r.held.size());
  Report("obtained", r.held.size() * chunk);
  Report("refusal_code", r.refusal);
  memtest::Barrier(dir, "filled-", nprocs);
  memtest::HoldPoint("full");
  memtest::Barrier(dir, "held-", nprocs);
  FreeAll(r.held);
  std::printf("done\n");
  return 0;
}

int Threads(int nthreads, uint64_t chunk) {
  memtest::InitPrimaryContext(0);
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  std::atomic<int> ready{0};
  std::vector<FillResult> results(nthreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      CHECK_CU(cuCtxSetCurrent(ctx));
      ready.fetch_add(1);
      while (ready.load() < nthreads) std::this_thread::yield();
      results[t] = Fill(chunk);
    });
  }
  for (auto& t : threads) t.join();
  uint64_t count = 0;
  int bad = 0;
  for (const auto& r : results) {
    count += r.held.size();
    if (r.refusal != CUDA_ERROR_OUT_OF_MEMORY) ++bad;
  }
  Report("count", count);
  Report("obtained", count * chunk);
  Report("threads_not_refused_with_oom", bad);
  memtest::HoldPoint("full");
  for (const auto& r : results) FreeAll(r.held);
  std::printf("done\n");
  return 0;
}

int Churn(const std::string& dir, int nprocs, int nthreads, uint64_t chunk, int ms) {
  memtest::InitPrimaryContext(0);
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  memtest::Barrier(dir, "ready-", nprocs);
  std::atomic<long> successes{0}, refusals{0}, other{0};
  std::atomic<int> last_other{0};
  const int64_t deadline = memtest::NowNs() + static_cast<int64_t>(ms) * 1'000'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      CHECK_CU(cuCtxSetCurrent(ctx));
      std::minstd_rand rng(static_cast<unsigned>(getpid() * 131 + t));
      std::vector<CUdeviceptr> held;
      while (memtest::NowNs() < deadline) {
        if (held.empty() || (held.size() < 3 && rng() % 2 == 0)) {
          CUdeviceptr p = 0;
          const CUresult rc = cuMemAlloc(&p, chunk);
          if (rc == CUDA_SUCCESS) {
            held.push_back(p);
            successes.fetch_add(1);
          } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            refusals.fetch_add(1);
          } else {
            other.fetch_add(1);
            last_other.store(rc);
          }
        } else {
          CHECK_CU(cuMemFree(held.back()));
          held.pop_back();
        }
      }
      FreeAll(held);
    });
  }
  for (auto& t : threads) t.join();
  // Nobody exits before everyone has stopped: exits are tested on their own ("linger").
  memtest::Barrier(dir, "done-", nprocs);
  Report("successes", successes.load());
  Report("refusals", refusals.load());
  Report("other_errors", other.load());
  Report("last_other_code", last_other.load());
  std::printf("done\n");
  return 0;
}

// Allocates `total` in chunks; exits 3 at a refusal, or with `retry` at a refusal that lasts 10 s.
std::vector<CUdeviceptr> AllocateExactly(uint64_t total, uint64_t chunk, bool retry = false) {
  std::vector<CUdeviceptr> held;
  const int64_t deadline = memtest::NowNs() + 10'000'000'000;
  for (uint64_t done = 0; done < total; done += chunk) {
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc(&p, chunk);
    while (retry && rc == CUDA_ERROR_OUT_OF_MEMORY && memtest::NowNs() < deadline) {
      memtest::SleepMs(5);
      rc = cuMemAlloc(&p, chunk);
    }
    if (rc != CUDA_SUCCESS) {
      std::fprintf(stderr, "allocation %zu of %llu bytes failed: %d\n", held.size(),
                   static_cast<unsigned long long>(chunk), rc);
      std::exit(3);
    }
    held.push_back(p);
  }
  return held;
}

int Hold(uint64_t total, uint64_t chunk, const std::string& ready_file, bool retry) {
  memtest::InitPrimaryContext(0);
  AllocateExactly(total, chunk, retry);
  memtest::WriteFileAtomically(ready_file, std::to_string(getpid()));
  memtest::SleepMs(30'000);
  return 4;  // never killed: the harness failed to kill us
}

// Runs at exit, after vgpu's own exit handlers (registered later, so run earlier): the
// process, its context included, lives on for this long after vgpu has seen it exit.
int g_linger_ms = 0;
void Linger() { memtest::SleepMs(g_linger_ms); }

int LingerAtExit(const std::string& dir, int ms) {
  g_linger_ms = ms;
  CHECK(std::atexit(Linger) == 0);
  memtest::InitPrimaryContext(0);
  memtest::TouchFile(dir + "/linger-ready");
  const int64_t deadline = memtest::NowNs() + 10'000'000'000;
  while (!memtest::FileExists(dir + "/go") && memtest::NowNs() < deadline) memtest::SleepMs(1);
  std::printf("exiting\n");
  return 0;
}

int Leak(uint64_t total, uint64_t chunk) {
  memtest::InitPrimaryContext(0);
  AllocateExactly(total, chunk);
  std::printf("leaving without freeing\n");
  return 0;
}

// Retries one allocation of `bytes` every 5 ms for up to `timeout_ms`; reports the outcome.
void RetryUntilAllocated(uint64_t bytes, int timeout_ms, int64_t start_ns) {
  int attempts = 0;
  CUresult rc;
  for (;;) {
    CUdeviceptr p = 0;
    rc = cuMemAlloc(&p, bytes);
    ++attempts;
    if (rc == CUDA_SUCCESS) {
      memtest::HoldPoint("obtained");  // the observer sees what the driver holds with it
      CHECK_CU(cuMemFree(p));
      break;
    }
    if (rc != CUDA_ERROR_OUT_OF_MEMORY) break;
    if (memtest::NowNs() - start_ns > static_cast<int64_t>(timeout_ms) * 1'000'000) break;
    memtest::SleepMs(5);
  }
  Report("obtained", rc == CUDA_SUCCESS ? 1 : 0);
  Report("elapsed_ms", (memtest::NowNs() - start_ns) / 1'000'000);
  Report("attempts", attempts);
  Report("last_code", rc);
}

int Reclaim(uint64_t bytes, int timeout_ms) {
  memtest::InitPrimaryContext(0);
  RetryUntilAllocated(bytes, timeout_ms, memtest::NowNs());
  return 0;
}

int Zombie(uint64_t child_bytes, uint64_t parent_bytes, int timeout_ms) {
  alarm(60);
  int fds[2];
  CHECK(pipe(fds) == 0);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    close(fds[0]);
    memtest::InitPrimaryContext(0);
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, child_bytes) != CUDA_SUCCESS) _exit(3);
    const char byte = 'x';
    if (write(fds[1], &byte, 1) != 1) _exit(4);
    memtest::SleepMs(30'000);
    _exit(5);
  }
  close(fds[1]);
  char byte = 0;
  if (read(fds[0], &byte, 1) != 1) {
    int status = 0;
    waitpid(child, &status, 0);
    std::fprintf(stderr, "child failed before allocating (status %d)\n", status);
    return 1;
  }
  memtest::InitPrimaryContext(0);
  {
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAlloc(&p, parent_bytes);
    Report("while_child_alive_code", rc);
    if (rc == CUDA_SUCCESS) CHECK_CU(cuMemFree(p));
  }
  CHECK(kill(child, SIGKILL) == 0);
  const int64_t killed_at = memtest::NowNs();
  // Let the kernel finish the kill (the child becomes a zombie), but do not reap it.
  siginfo_t info{};
  CHECK(waitid(P_PID, child, &info, WEXITED | WNOWAIT) == 0);
  RetryUntilAllocated(parent_bytes, timeout_ms, killed_at);
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  std::printf("done\n");
  return 0;
}

// A graph's memory is charged while it is instantiated and reaches the driver only at its first
// launch: the other thread's allocations, which reconcile with NVML near the limit, must not take
// that memory meanwhile.
int GraphRace(uint64_t graph_bytes, uint64_t chunk, int delay_ms) {
  const CUdevice dev = memtest::InitPrimaryContext(0);
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  // First one stream-ordered allocation: the driver's own memory for pools, which no allocation
  // call reports (VGPU_SIM_POOL_SETUP_MEMORY), is what the reconciliations have to find.
  CUdeviceptr first = 0;
  CHECK_CU(cuMemAllocAsync(&first, kMiB, nullptr));
  CHECK_CU(cuMemFreeAsync(first, nullptr));
  CHECK_CU(cuStreamSynchronize(nullptr));
  CUgraphExec exec = nullptr;
  CUresult graph_code = CUDA_SUCCESS;
  const char* refused_at = "never";
  std::thread graph_thread([&] {
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUgraph graph = nullptr;
    graph_code = memtest::GraphWithAllocation(dev, graph_bytes, &graph);
    if (graph_code != CUDA_SUCCESS) {
      refused_at = "build";
      return;
    }
    graph_code = cuGraphInstantiateWithFlags(&exec, graph, 0);
    CHECK_CU(cuGraphDestroy(graph));
    if (graph_code != CUDA_SUCCESS) {
      refused_at = "instantiate";
      exec = nullptr;
      return;
    }
    graph_code = cuGraphLaunch(exec, nullptr);
    if (graph_code != CUDA_SUCCESS) {
      refused_at = "launch";
      return;
    }
    CHECK_CU(cuStreamSynchronize(nullptr));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  FillResult r = Fill(chunk);
  graph_thread.join();
  Report("graph_code", graph_code);
  memtest::ReportText("graph_refused_at", refused_at);
  Report("count", r.held.size());
  Report("obtained", r.held.size() * chunk);
  Report("refusal_code", r.refusal);
  memtest::HoldPoint("full");
  FreeAll(r.held);
  if (exec != nullptr) CHECK_CU(cuGraphExecDestroy(exec));
  CHECK_CU(cuDeviceGraphMemTrim(dev));
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "share" && argc == 5) return Share(argv[2], ArgU64(argv[3]), ArgU64(argv[4]) * kMiB);
  if (mode == "threads" && argc == 4) return Threads(ArgU64(argv[2]), ArgU64(argv[3]) * kMiB);
  if (mode == "churn" && argc == 7) {
    return Churn(argv[2], ArgU64(argv[3]), ArgU64(argv[4]), ArgU64(argv[5]) * kMiB, ArgU64(argv[6]));
  }
  if (mode == "hold" && argc == 5) return Hold(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB, argv[4], false);
  if (mode == "hold_when_free" && argc == 5) {
    return Hold(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB, argv[4], true);
  }
  if (mode == "linger" && argc == 4) return LingerAtExit(argv[2], ArgU64(argv[3]));
  if (mode == "leak" && argc == 4) return Leak(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB);
  if (mode == "reclaim" && argc == 4) return Reclaim(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]));
  if (mode == "zombie" && argc == 5) return Zombie(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB, ArgU64(argv[4]));
  if (mode == "graph_race" && argc == 5) {
    return GraphRace(ArgU64(argv[2]) * kMiB, ArgU64(argv[3]) * kMiB, ArgU64(argv[4]));
  }
  std::fprintf(stderr, "usage: see the comment at the top of memory_procs.cc\n");
  return 2;
}
