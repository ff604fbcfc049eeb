// Concurrent kernel workload for the compute-limit matrix (bench/compute_matrix.py): kernels of a
// fixed amount of work that last a given time alone on some of the GPU's SMs, launched from several
// streams and host threads (or replayed as a CUDA graph with parallel branches), each stream kept
// busy with at most two batches in flight (flow control through events, no device-wide sync).
// Throughput = kernels completed per second of a measured window, so it reflects the
// application's concurrency: natively N streams of narrow kernels run N kernels at once.
//
//   concurrency run --kernel-us K [--streams S] [--threads T] [--blocks-per-sm F]
//                   [--graph-branches B --graph-depth L] [--warmup W] [--seconds D]
//                   [--barrier DIR NAME] [--clock-spin] [--host-ns N] [--trace FILE]
//                   [--pause RUN_MS IDLE_MS] [--mark-every N [--query-every M]] [--host-times]
//                   [--steps N [--expensive-every M --expensive-us E] [--host-us H] [--stamps FILE]]
//     --kernel-us      run time of one kernel alone at the maximum SM clock (WorkKernel: a
//                      chain of dependent loads, sized by IterationsPerUs); it needs that much
//                      GPU time whoever else runs, so kernels/s is work done also when contexts
//                      time-slice
//     --clock-spin     spin on clock64() instead (SpinKernel: wall time; a kernel whose context is
//                      switched out keeps counting and finishes early, so several contexts all seem
//                      to run at full speed)
//     --streams        streams, each owned by one host thread (S % T == 0; default 1)
//     --threads        host threads launching (default 1)
//     --blocks-per-sm  kernel width: blocks of 256 threads per SM, 1 = one per SM (default 1);
//                      wider kernels leave less room for others
//     --graph-branches B, --graph-depth L: instead of plain launches, replay a graph whose B
//                      parallel branches are chains of L kernels (one stream, one thread)
//     --barrier DIR NAME: after the warm-up create DIR/ready.NAME and keep warming up until DIR/go
//                      exists (it holds a CLOCK_MONOTONIC start time, seconds) and that time came
//     --host-ns N      the host thread spins N ns after each kernel launch (what a launcher that
//                      is N ns slower per launch, e.g. through an interposer, loses natively)
//     --trace FILE     write each batch's completion time (a timing event's, on CLOCK_MONOTONIC)
//                      to FILE: "K time_ns kernels" lines, "P time_ns" where a pause ended and
//                      "W start_ns end_ns" (the window); for bench/compute/trace_report.py
//     --pause RUN_MS IDLE_MS: each launching thread stops launching for IDLE_MS after every
//                      RUN_MS of launches, wherever it is in a batch (as a limiter's rest does)
//     --mark-every N   record a timing event on the stream after every N kernels (as a limiter's
//                      marks do); --query-every M asks about the latest one after every M kernels
//     --host-times     time the launching threads' launch calls and their blocking waits for a
//                      batch inside the window (two clock readings per call): adds launch_us (host
//                      time per launch call) and wait_share (share of the launching threads' window
//                      spent blocked in cudaEventSynchronize) to the JSON line
//     --steps N        a server's steps instead of batches in flight (one stream, one thread): N
//                      launches, then cudaStreamSynchronize, then --host-us H of host work (a
//                      spin; default 0), and again; with --expensive-every M every M-th launch
//                      is a kernel of --expensive-us E instead of --kernel-us (a prefill among
//                      decode steps); with --graph-branches each launch replays the graph (a
//                      server's decode step captured as a graph; not with --expensive-every or
//                      --stamps). Not with --trace, --pause, --mark-every, --host-times (which
//                      times only batches' waits)
//     --stamps FILE    (--steps, WorkKernel) the kernels stamp the GPU's global timer as their
//                      first block starts and their last block ends (two atomics per block); the
//                      launches of the steps started inside the window (the first 2^20) are
//                      written to FILE: "# concurrency stamps 1",
//                      "O LOW HIGH" twice (CLOCK_MONOTONIC ns = global timer ns + an offset between
//                      these bounds, from stamped kernels run alone before the warm-up and after
//                      the window; the clocks may drift apart in between), then one line
//                      per launch in launch order, "k START END EXPENSIVE" (global timer ns; 0 or
//                      1). What the GPU really ran, to hold a limiter's busy time against
//                      (bench/compute/host_mix.py --stamps)
//   Prints one JSON line: kernels, seconds, rate (kernels/s), kernel_us, concurrency
//   (rate x kernel time, with --steps the mix's mean: kernels running at once on average),
//   kernel ("work" or "clock-spin"), per_kernel (its iterations or cycles), t_start, t_end.
// Every CUDA return code is checked (exit 2). Clocks are never changed.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "spin_common.cuh"

namespace {

struct Options {
  double kernel_us = 0;
  int streams = 1;
  int threads = 1;
  int blocks_per_sm = 1;
  int graph_branches = 0;
  int graph_depth = 1;
  double warmup_s = 1.0;
  double seconds = 3.0;
  std::string barrier_dir, barrier_name;
  bool clock_spin = false;
  long long host_ns = 0;
  std::string trace_path;
  double pause_run_s = 0, pause_idle_s = 0;
  int mark_every = 0, query_every = 0;
  bool host_times = false;
  int steps = 0;
  int expensive_every = 0;
  double expensive_us = 0;
  double host_us = 0;
  std::string stamps_path;
};

struct Shared {
  long long cycles = 0;      // --clock-spin: clock64() cycles per kernel
  long long iterations = 0;  // otherwise: WorkKernel iterations per kernel
  long long cycles_expensive = 0, iterations_expensive = 0;  // --steps: the same, expensive kernel
  bool clock_spin = false;
  long long host_ns = 0;     // --host-ns: spin this long after each launch
  double pause_run_s = 0, pause_idle_s = 0;  // --pause
  int mark_every = 0, query_every = 0;       // --mark-every, --query-every
  bool host_times = false;                   // --host-times: the sums below, inside the window
  std::atomic<long long> launch_ns{0}, launch_calls{0}, wait_ns{0};
  bool trace = false;                        // --trace: timing events per batch
  cudaEvent_t ref = nullptr;                 // ... measured against this one, recorded at
  double ref_s = 0;                          // CLOCK_MONOTONIC ref_s
  std::mutex trace_mu;
  std::vector<std::pair<double, int>> completions;  // guarded by trace_mu: (time, kernels)
  std::vector<double> resumes;                      // guarded by trace_mu: pauses' ends
  int grid = 0;
  unsigned long long* sink = nullptr;
  std::atomic<int> phase{0};         // 0 warm-up, 1 measuring, 2 stop
  std::atomic<long long> counted{0};  // kernels completed inside the window
  double t_start = 0, t_end = 0;
  // --stamps: per launch slot, the first block's start (stored inverted: an atomicMax of ~t keeps
  // the earliest) and the last block's end on the global timer; slots past stamp_slots unstamped.
  unsigned long long* stamp_start = nullptr;
  unsigned long long* stamp_end = nullptr;
  long long stamp_slots = 0;
  long long stamp_first = -1, stamp_last = -1;  // launches inside the window: [first, last)
  std::vector<char> stamp_expensive;            // per slot
};

// One stream with a ring of batches in flight.
struct Lane {
  cudaStream_t stream = nullptr;
  cudaGraphExec_t graph = nullptr;  // graph mode: one launch = one batch
  int kernels_per_batch = 1;
  cudaEvent_t events[2];
  cudaEvent_t marks[64] = {};  // --mark-every: a ring of timing events
  long long launched = 0, marked = 0;
  long long seq[2] = {0, 0};  // launch order of each batch in flight
  int head = 0, inflight = 0;
};

// A call's host time when --host-times and the window is open (else no clock is read).
struct HostTimer {
  explicit HostTimer(const Shared& sh)
      : start(sh.host_times && sh.phase.load(std::memory_order_relaxed) == 1 ? Monotonic() : 0) {}
  long long ElapsedNs() const { return start > 0 ? static_cast<long long>((Monotonic() - start) * 1e9) : 0; }
  double start;
};

// Host work: spins for `seconds` (a launcher slower per launch, a server's step between syncs).
void SpinHost(double seconds) {
  const double until = Monotonic() + seconds;
  while (Monotonic() < until) {
  }
}

// The global timer (ns) on the GPU.
__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// WorkKernel that stamps its span (--stamps): each block's first thread notes when the block
// starts and, after the block's work, when it ends.
__global__ void StampedWorkKernel(long long iterations, unsigned long long* sink, unsigned long long* start,
                                  unsigned long long* end) {
  if (threadIdx.x == 0) atomicMax(start, ~GlobalTimer());
  __syncthreads();
  WorkChain(iterations, 0, sink, nullptr);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(end, GlobalTimer());
}

void LaunchKernel(Shared& sh, cudaStream_t stream, bool expensive = false, long long slot = -1) {
  const HostTimer timer(sh);
  if (slot >= 0) {
    StampedWorkKernel<<<sh.grid, 256, 0, stream>>>(expensive ? sh.iterations_expensive : sh.iterations, sh.sink,
                                                   sh.stamp_start + slot, sh.stamp_end + slot);
  } else if (sh.clock_spin) {
    SpinKernel<<<sh.grid, 256, 0, stream>>>(expensive ? sh.cycles_expensive : sh.cycles, sh.sink);
  } else {
    WorkKernel<<<sh.grid, 256, 0, stream>>>(expensive ? sh.iterations_expensive : sh.iterations, 0, sh.sink,
                                            nullptr);
  }
  CHECK(cudaGetLastError());
  if (timer.start > 0) {
    sh.launch_ns.fetch_add(timer.ElapsedNs(), std::memory_order_relaxed);
    sh.launch_calls.fetch_add(1, std::memory_order_relaxed);
  }
  if (sh.host_ns > 0) SpinHost(sh.host_ns * 1e-9);
}

// --pause: every pause_run_s of launching, the thread stops for pause_idle_s (thread_local:
// each launching thread keeps its own rhythm).
void MaybePause(Shared& sh) {
  if (sh.pause_run_s <= 0) return;
  thread_local double pause_at = 0;
  const double now = Monotonic();
  if (pause_at == 0) pause_at = now + sh.pause_run_s;
  if (now < pause_at) return;
  const double until = now + sh.pause_idle_s;
  while (Monotonic() < until) usleep(200);
  const double resumed = Monotonic();
  pause_at = resumed + sh.pause_run_s;
  std::lock_guard<std::mutex> lock(sh.trace_mu);
  sh.resumes.push_back(resumed);
}

// --mark-every / --query-every after each kernel of a lane.
void MarkAndQuery(Shared& sh, Lane& lane) {
  ++lane.launched;
  if (sh.mark_every > 0 && lane.launched % sh.mark_every == 0) {
    CHECK(cudaEventRecord(lane.marks[lane.marked++ % 64], lane.stream));
  }
  if (sh.query_every > 0 && lane.launched % sh.query_every == 0 && lane.marked > 0) {
    const cudaError_t e = cudaEventQuery(lane.marks[(lane.marked - 1) % 64]);
    if (e != cudaErrorNotReady) CHECK(e);
  }
}

void LaunchBatch(Shared& sh, Lane& lane, long long seq) {
  if (lane.graph != nullptr) {
    MaybePause(sh);
    CHECK(cudaGraphLaunch(lane.graph, lane.stream));
  } else {
    for (int k = 0; k < lane.kernels_per_batch; ++k) {
      MaybePause(sh);
      LaunchKernel(sh, lane.stream);
      MarkAndQuery(sh, lane);
    }
  }
  const int slot = (lane.head + lane.inflight) % 2;
  CHECK(cudaEventRecord(lane.events[slot], lane.stream));
  lane.seq[slot] = seq;
  ++lane.inflight;
}

// Retires the lane's oldest batch once complete (blocking when `wait`); counts it when the window
// is open at that moment. Returns whether a batch was retired.
bool Retire(Shared& sh, Lane& lane, bool wait) {
  if (lane.inflight == 0) return false;
  cudaEvent_t ev = lane.events[lane.head];
  if (wait) {
    const HostTimer timer(sh);
    CHECK(cudaEventSynchronize(ev));
    if (timer.start > 0) sh.wait_ns.fetch_add(timer.ElapsedNs(), std::memory_order_relaxed);
  } else {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) return false;
    CHECK(e);
  }
  if (sh.phase.load(std::memory_order_acquire) == 1) sh.counted.fetch_add(lane.kernels_per_batch);
  if (sh.trace) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, sh.ref, ev));
    std::lock_guard<std::mutex> lock(sh.trace_mu);
    sh.completions.emplace_back(sh.ref_s + ms * 1e-3, lane.kernels_per_batch);
  }
  lane.head = (lane.head + 1) % 2;
  --lane.inflight;
  return true;
}

void Drive(Shared& sh, std::vector<Lane>* lanes) {
  long long seq = 0;
  while (sh.phase.load(std::memory_order_acquire) != 2) {
    for (Lane& lane : *lanes) {
      while (lane.inflight < 2) LaunchBatch(sh, lane, ++seq);
    }
    bool any = false;
    for (Lane& lane : *lanes) any |= Retire(sh, lane, false);
    if (any) continue;
    // Every lane is full: wait for the batch launched first.
    Lane* oldest = &(*lanes)[0];
    for (Lane& lane : *lanes) {
      if (lane.seq[lane.head] < oldest->seq[oldest->head]) oldest = &lane;
    }
    Retire(sh, *oldest, true);
  }
  for (Lane& lane : *lanes) {
    while (lane.inflight > 0) Retire(sh, lane, true);
  }
}

// --steps: a server's loop on one stream (with a graph: N replays per step). Counts a step's
// kernels when the window is open as its synchronisation returns.
// With --stamps, the launches of the steps that start inside the window are stamped, in order.
void DriveSteps(Shared& sh, Lane* lane, const Options& o) {
  long long launched = 0, stamped = 0;
  while (sh.phase.load(std::memory_order_acquire) != 2) {
    const bool stamp = sh.stamp_slots > 0 && sh.phase.load(std::memory_order_acquire) == 1 &&
                       stamped + o.steps <= sh.stamp_slots;
    if (stamp && sh.stamp_first < 0) sh.stamp_first = stamped;
    for (int k = 0; k < o.steps; ++k) {
      ++launched;
      if (lane->graph != nullptr) {
        CHECK(cudaGraphLaunch(lane->graph, lane->stream));
        continue;
      }
      const bool expensive = o.expensive_every > 0 && launched % o.expensive_every == 0;
      if (stamp) sh.stamp_expensive[stamped] = expensive;
      LaunchKernel(sh, lane->stream, expensive, stamp ? stamped++ : -1);
    }
    CHECK(cudaStreamSynchronize(lane->stream));
    const int per_launch = lane->graph != nullptr ? lane->kernels_per_batch : 1;
    if (sh.phase.load(std::memory_order_acquire) == 1) sh.counted.fetch_add(o.steps * per_launch);
    SpinHost(o.host_us * 1e-6);
  }
  if (sh.stamp_first >= 0) sh.stamp_last = stamped;
}

cudaGraphExec_t BuildGraph(Shared& sh, cudaStream_t main, int branches, int depth) {
  std::vector<cudaStream_t> side(branches);
  std::vector<cudaEvent_t> joins(branches);
  cudaEvent_t fork;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  for (int b = 0; b < branches; ++b) {
    CHECK(cudaStreamCreateWithFlags(&side[b], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&joins[b], cudaEventDisableTiming));
  }
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
  CHECK(cudaEventRecord(fork, main));
  for (int b = 0; b < branches; ++b) {
    CHECK(cudaStreamWaitEvent(side[b], fork, 0));
    for (int k = 0; k < depth; ++k) {
      LaunchKernel(sh, side[b]);
    }
    CHECK(cudaEventRecord(joins[b], side[b]));
    CHECK(cudaStreamWaitEvent(main, joins[b], 0));
  }
  CHECK(cudaStreamEndCapture(main, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  return exec;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "concurrency: %s needs a value\n", name);
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--kernel-us") o->kernel_us = atof(next("--kernel-us"));
    else if (a == "--streams") o->streams = atoi(next("--streams"));
    else if (a == "--threads") o->threads = atoi(next("--threads"));
    else if (a == "--blocks-per-sm") o->blocks_per_sm = atoi(next("--blocks-per-sm"));
    else if (a == "--graph-branches") o->graph_branches = atoi(next("--graph-branches"));
    else if (a == "--graph-depth") o->graph_depth = atoi(next("--graph-depth"));
    else if (a == "--warmup") o->warmup_s = atof(next("--warmup"));
    else if (a == "--seconds") o->seconds = atof(next("--seconds"));
    else if (a == "--clock-spin") o->clock_spin = true;
    else if (a == "--host-ns") o->host_ns = atoll(next("--host-ns"));
    else if (a == "--host-times") o->host_times = true;
    else if (a == "--trace") o->trace_path = next("--trace");
    else if (a == "--pause") {
      o->pause_run_s = atof(next("--pause")) * 1e-3;
      o->pause_idle_s = atof(next("--pause")) * 1e-3;
    } else if (a == "--mark-every") o->mark_every = atoi(next("--mark-every"));
    else if (a == "--query-every") o->query_every = atoi(next("--query-every"));
    else if (a == "--steps") o->steps = atoi(next("--steps"));
    else if (a == "--expensive-every") o->expensive_every = atoi(next("--expensive-every"));
    else if (a == "--expensive-us") o->expensive_us = atof(next("--expensive-us"));
    else if (a == "--host-us") o->host_us = atof(next("--host-us"));
    else if (a == "--stamps") o->stamps_path = next("--stamps");
    else if (a == "--barrier") {
      o->barrier_dir = next("--barrier");
      o->barrier_name = next("--barrier");
    } else {
      fprintf(stderr, "concurrency: unknown argument %s\n", a.c_str());
      return false;
    }
  }
  if (!(o->kernel_us > 0) || o->streams < 1 || o->threads < 1 || o->streams % o->threads != 0 ||
      o->blocks_per_sm < 1 || o->graph_branches < 0 || o->graph_depth < 1 || o->seconds <= 0 || o->warmup_s < 0 || o->host_ns < 0 || o->pause_run_s < 0 || o->pause_idle_s < 0 ||
      o->mark_every < 0 || o->query_every < 0 || (o->query_every > 0 && o->mark_every == 0)) {
    fprintf(stderr, "concurrency: bad arguments (kernel-us > 0, streams a multiple of threads, ...)\n");
    return false;
  }
  const bool steps_options =
      o->expensive_every != 0 || o->expensive_us != 0 || o->host_us != 0 || !o->stamps_path.empty();
  if (o->steps < 0 || (o->steps == 0 && steps_options) ||
      (o->steps > 0 && (o->streams != 1 || o->threads != 1 || !o->trace_path.empty() ||
                        (o->graph_branches > 0 && (o->expensive_every > 0 || !o->stamps_path.empty())) ||
                        o->pause_run_s > 0 || o->mark_every > 0 || o->host_times || o->host_us < 0 ||
                        o->expensive_every < 0 || (o->expensive_every > 0) != (o->expensive_us > 0) ||
                        (!o->stamps_path.empty() && o->clock_spin)))) {
    fprintf(stderr, "concurrency: bad --steps options (N > 0 on one stream and thread, without --trace, --pause, "
                    "--mark-every or --host-times; --graph-branches without --expensive-every or --stamps; "
                    "--expensive-every M > 0 with --expensive-us E > 0; "
                    "--host-us >= 0; --stamps not with --clock-spin)\n");
    return false;
  }
  return true;
}


// --trace: the batches' completion times, the pauses' ends and the window, in nanoseconds.
bool WriteTrace(const std::string& path, Shared& sh) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) {
    fprintf(stderr, "concurrency: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  std::lock_guard<std::mutex> lock(sh.trace_mu);
  fprintf(f, "# concurrency trace 1\nW %.0f %.0f\n", sh.t_start * 1e9, sh.t_end * 1e9);
  for (const auto& c : sh.completions) fprintf(f, "K %.0f %d\n", c.first * 1e9, c.second);
  for (double r : sh.resumes) fprintf(f, "P %.0f\n", r * 1e9);
  if (fclose(f) != 0) {
    fprintf(stderr, "concurrency: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  return true;
}

// --stamps: the bounds of the offset from the global timer to CLOCK_MONOTONIC, from stamped
// one-iteration kernels run alone in the slots past sh.stamp_slots (`first`: 0 before the run, 8
// after it; the tightest of eight): a kernel starts after the host's clock read before its launch
// and ends before the one after its synchronisation.
struct StampBounds {
  long long low = std::numeric_limits<long long>::min();
  long long high = std::numeric_limits<long long>::max();
};

StampBounds StampOffset(Shared& sh, cudaStream_t stream, int first) {
  StampBounds b;
  for (int i = first; i < first + 8; ++i) {
    const long long slot = sh.stamp_slots + i;
    const double before = Monotonic();
    StampedWorkKernel<<<1, 256, 0, stream>>>(1, sh.sink, sh.stamp_start + slot, sh.stamp_end + slot);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(stream));
    const double after = Monotonic();
    unsigned long long start = 0, end = 0;
    CHECK(cudaMemcpy(&start, sh.stamp_start + slot, sizeof start, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&end, sh.stamp_end + slot, sizeof end, cudaMemcpyDeviceToHost));
    b.low = std::max(b.low, static_cast<long long>(before * 1e9) - static_cast<long long>(~start));
    b.high = std::min(b.high, static_cast<long long>(after * 1e9) - static_cast<long long>(end));
  }
  return b;
}

bool WriteStamps(const std::string& path, Shared& sh, const StampBounds& before, const StampBounds& after) {
  const long long n = sh.stamp_first >= 0 ? sh.stamp_last - sh.stamp_first : 0;
  std::vector<unsigned long long> start(n), end(n);
  if (n > 0) {
    CHECK(cudaMemcpy(start.data(), sh.stamp_start + sh.stamp_first, n * sizeof(start[0]), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(end.data(), sh.stamp_end + sh.stamp_first, n * sizeof(end[0]), cudaMemcpyDeviceToHost));
  }
  FILE* f = fopen(path.c_str(), "w");
  if (!f) {
    fprintf(stderr, "concurrency: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  fprintf(f, "# concurrency stamps 1\nO %lld %lld\nO %lld %lld\n", before.low, before.high, after.low, after.high);
  for (long long i = 0; i < n; ++i) {
    fprintf(f, "k %llu %llu %d\n", ~start[i], end[i], sh.stamp_expensive[sh.stamp_first + i] ? 1 : 0);
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "concurrency: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  return true;
}

// Waits out the warm-up, then the barrier (if any); returns the start time of the window.
double WaitForStart(const Options& o, double warm_end) {
  while (Monotonic() < warm_end) usleep(1000);
  if (o.barrier_dir.empty()) return Monotonic();
  const std::string ready = o.barrier_dir + "/ready." + o.barrier_name;
  FILE* f = fopen(ready.c_str(), "w");
  if (!f) {
    fprintf(stderr, "concurrency: cannot create %s: %s\n", ready.c_str(), strerror(errno));
    exit(2);
  }
  fclose(f);
  for (;;) {
    const double go = ReadGoTime((o.barrier_dir + "/go").c_str());
    if (go >= 0) {
      while (Monotonic() < go) usleep(200);
      return Monotonic();
    }
    if (Monotonic() > warm_end + 120) {
      fprintf(stderr, "concurrency: barrier timeout\n");
      exit(2);
    }
    usleep(1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], "run") != 0) {
    fprintf(stderr, "usage: concurrency run --kernel-us K [--streams S] [--threads T] [--blocks-per-sm F] "
                    "[--graph-branches B --graph-depth L] [--warmup W] [--seconds D] [--barrier DIR NAME] [--clock-spin] "
                    "[--host-ns N] [--trace FILE] [--pause RUN_MS IDLE_MS] [--mark-every N [--query-every M]] [--host-times] "
                    "[--steps N [--expensive-every M --expensive-us E] [--host-us H] [--stamps FILE]]\n");
    return 2;
  }
  Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  Shared sh;
  Gpu probe;
  Setup(probe);  // one block per SM: measures the kernel's rate alone
  sh.grid = probe.grid * o.blocks_per_sm;
  sh.sink = probe.sink;
  sh.clock_spin = o.clock_spin;
  sh.host_ns = o.host_ns;
  sh.host_times = o.host_times;
  sh.pause_run_s = o.pause_run_s;
  sh.pause_idle_s = o.pause_idle_s;
  sh.mark_every = o.mark_every;
  sh.query_every = o.query_every;
  sh.trace = !o.trace_path.empty();
  if (sh.trace) {  // the reference event's time on CLOCK_MONOTONIC (within a few us)
    CHECK(cudaEventCreate(&sh.ref));
    CHECK(cudaEventRecord(sh.ref, probe.stream));
    CHECK(cudaEventSynchronize(sh.ref));
    sh.ref_s = Monotonic();
  }
  if (o.clock_spin) {
    const double per_us = CyclesPerUs(probe);
    sh.cycles = static_cast<long long>(per_us * o.kernel_us);
    sh.cycles_expensive = static_cast<long long>(per_us * o.expensive_us);
  } else {
    const double per_us = IterationsPerUs(probe);
    sh.iterations = std::max(1LL, static_cast<long long>(per_us * o.kernel_us));
    sh.iterations_expensive = std::max(1LL, static_cast<long long>(per_us * o.expensive_us));
  }
  const bool graph_mode = o.graph_branches > 0;
  const int lanes_total = graph_mode ? 1 : o.streams;
  const int threads = graph_mode ? 1 : o.threads;
  std::vector<std::vector<Lane>> per_thread(threads);
  const int per_batch = std::max(1, static_cast<int>(std::lround(2000.0 / o.kernel_us)));  // ~2 ms per lane
  for (int l = 0; l < lanes_total; ++l) {
    Lane lane;
    CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
    for (auto& e : lane.events) CHECK(cudaEventCreateWithFlags(&e, sh.trace ? cudaEventDefault : cudaEventDisableTiming));
    if (o.mark_every > 0) {
      for (auto& e : lane.marks) CHECK(cudaEventCreate(&e));
    }
    if (graph_mode) {
      lane.graph = BuildGraph(sh, lane.stream, o.graph_branches, o.graph_depth);
      lane.kernels_per_batch = o.graph_branches * o.graph_depth;
    } else {
      lane.kernels_per_batch = per_batch;
    }
    per_thread[l % threads].push_back(lane);
  }
  StampBounds stamps_before, stamps_after;
  if (!o.stamps_path.empty()) {  // room for 2 s of 2 us launches; StampOffset's 16 past them
    sh.stamp_slots = 1 << 20;
    const size_t bytes = (sh.stamp_slots + 16) * sizeof(unsigned long long);
    CHECK(cudaMalloc(&sh.stamp_start, bytes));
    CHECK(cudaMalloc(&sh.stamp_end, bytes));
    CHECK(cudaMemset(sh.stamp_start, 0, bytes));
    CHECK(cudaMemset(sh.stamp_end, 0, bytes));
    sh.stamp_expensive.assign(sh.stamp_slots, 0);
    stamps_before = StampOffset(sh, per_thread[0][0].stream, 0);
  }
  const double warm_end = Monotonic() + o.warmup_s;
  std::vector<std::thread> workers;
  if (o.steps > 0) {
    workers.emplace_back(DriveSteps, std::ref(sh), &per_thread[0][0], std::cref(o));
  } else {
    for (int t = 0; t < threads; ++t) workers.emplace_back(Drive, std::ref(sh), &per_thread[t]);
  }
  sh.t_start = WaitForStart(o, warm_end);
  sh.phase.store(1, std::memory_order_release);
  while (Monotonic() < sh.t_start + o.seconds) usleep(500);
  sh.phase.store(2, std::memory_order_release);
  sh.t_end = Monotonic();
  for (auto& w : workers) w.join();
  if (!o.stamps_path.empty()) stamps_after = StampOffset(sh, per_thread[0][0].stream, 8);
  const double seconds = sh.t_end - sh.t_start;
  const long long kernels = sh.counted.load();
  const double rate = kernels / seconds;
  const double mean_kernel_us =  // --steps: the mix's mean kernel time
      o.expensive_every > 0 ? o.kernel_us + (o.expensive_us - o.kernel_us) / o.expensive_every : o.kernel_us;
  if (o.host_times) {  // the JSON line goes on below
    const long long calls = std::max(1LL, sh.launch_calls.load());
    printf("{\"launch_us\": %.3f, \"wait_share\": %.4f, ", sh.launch_ns.load() * 1e-3 / calls,
           sh.wait_ns.load() * 1e-9 / (seconds * threads));
  } else {
    printf("{");
  }
  printf("\"kernels\": %lld, \"seconds\": %.6f, \"rate\": %.3f, \"kernel_us\": %.3f, \"concurrency\": %.4f, "
         "\"streams\": %d, \"threads\": %d, \"graph_branches\": %d, \"kernel\": \"%s\", \"per_kernel\": %lld, "
         "\"t_start\": %.6f, \"t_end\": %.6f}\n",
         kernels, seconds, rate, o.kernel_us, rate * mean_kernel_us * 1e-6, lanes_total, threads, o.graph_branches,
         o.clock_spin ? "clock-spin" : "work", o.clock_spin ? sh.cycles : sh.iterations, sh.t_start, sh.t_end);
  fflush(stdout);
  if (sh.trace && !WriteTrace(o.trace_path, sh)) return 2;
  if (!o.stamps_path.empty()) {
    if (!WriteStamps(o.stamps_path, sh, stamps_before, stamps_after)) return 2;
    CHECK(cudaFree(sh.stamp_start));
    CHECK(cudaFree(sh.stamp_end));
  }
  for (auto& lanes : per_thread) {
    for (Lane& lane : lanes) {
      if (lane.graph != nullptr) CHECK(cudaGraphExecDestroy(lane.graph));
      for (auto& e : lane.events) CHECK(cudaEventDestroy(e));
      for (auto& e : lane.marks) {
        if (e != nullptr) CHECK(cudaEventDestroy(e));
      }
      CHECK(cudaStreamDestroy(lane.stream));
    }
  }
  CHECK(cudaFree(probe.sink));
  CHECK(cudaStreamDestroy(probe.stream));
  return 0;
}
