// What the compute limiter's timing events cost and measure on a real GPU, without the library:
// the host time of each driver call on the limited launch path of a stream that runs dry between
// launches, the GPU time an event takes between two queued kernels, and what a begin/mark pair
// around one launch reads against the launch's own device time.
//
//   event_cost [--iterations N] [--parts host,gpu,bracket,order,util,lookup]   (default: all)
//
// Parts (each printed as "part | case | value"):
//   host      one stream, a WorkKernel of ~8 us per iteration and 20 us of host spin after it (the
//             stream is idle at every launch, as a launcher slower than its kernels leaves it):
//             per call, the first cuEventQuery of the previous iteration's mark (complete by then),
//             cuEventRecord of a begin on the idle stream, the launch, cuEventRecord of the mark
//             right after it; then cuEventQuery of an event still pending (behind a long kernel).
//             Each mode records only some of the calls, so that the loop's time per iteration
//             shows what they add together. Then the first look at a completed mark by other
//             calls: cuStreamQuery of the idle stream, or cuEventElapsedTime of a begin and the
//             mark never queried (and a query of the mark after it); and cuEventElapsedTime to a
//             mark still pending (NOT_READY, and what that costs).
//   gpu       400 kernels of 5 us and of 20 us queued behind a blocker kernel, with and without an
//             event recorded after each: the device time per kernel from events around the run
//             (so the host's pace does not matter), and the difference per event.
//   bracket   a begin and a mark around one launch, on an idle stream and behind a 1 ms kernel,
//             for kernels of 20 us and 2 ms: their elapsed time against the kernel's device time
//             in a queued run (the part above).
//   order     an event recorded behind a 2 ms kernel: its time after an event recorded before the
//             kernel (the kernel's length when the event waits for it).
//   util      what NVML's GPU-Util counts of a tracker's [begin, mark] on an idle GPU: every period
//             (25 us to 400 us) of host time one kernel of 5 us (or a chain of 8), the stream
//             synchronised after it, without events and with a begin before and a mark after each
//             kernel; 3 s each, GPU-Util from the driver's own samples (nvmlDeviceGetSamples) as
//             busy time per period, against the chain's span from events around it (a separate
//             run of the same chains after the same idle time). Shows whether the events' GPU time
//             counts as busy and how far [begin, mark] exceeds the busy time after idle gaps.
//   lookup    the other driver calls the limited launch path makes at every launch, besides
//             events (src/interpose/compute_limit.cc, LaunchGuard): cuCtxGetCurrent,
//             cuCtxGetDevice, cuStreamIsCapturing (of a created stream and of the legacy one),
//             and a CLOCK_MONOTONIC read; per call, the mean over a million calls, best of three.
// Every CUDA return code is checked (exit 2). Clocks are never changed.
#include <cuda.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spin_common.cuh"

namespace {

#define CHECK_CU(call) CheckDriver((call), #call, __LINE__)

void CheckDriver(CUresult r, const char* call, int line) {
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  fprintf(stderr, "event_cost: %s failed at line %d: %s\n", call, line, name != nullptr ? name : "?");
  exit(2);
}

void SpinHost(double seconds) {
  const double until = Monotonic() + seconds;
  while (Monotonic() < until) {
  }
}

double g_iterations_per_us = 0;  // WorkKernel's rate (IterationsPerUs)

// A WorkKernel of `us` on the stream, one block per SM.
void Work(const Gpu& g, double us) {
  WorkKernel<<<g.grid, g.block, 0, g.stream>>>(static_cast<long long>(g_iterations_per_us * us), 0, g.sink, nullptr);
  CHECK(cudaGetLastError());
}

// --- host: the driver calls of the dry-stream path, call by call ------------------------------
void HostPart(const Gpu& g, int n) {
  CUstream s = reinterpret_cast<CUstream>(g.stream);
  std::vector<CUevent> events(256);
  for (CUevent& e : events) CHECK_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
  struct Mode {
    const char* name;
    bool query, begin, mark;
  };
  double baseline = 0;
  for (const Mode& m : {Mode{"launch only", false, false, false}, Mode{"query + begin + mark", true, true, true},
                        Mode{"query + mark", true, false, true}, Mode{"begin only", false, true, false}}) {
    double query_s = 0, begin_s = 0, launch_s = 0, mark_s = 0;
    int previous = -1;
    CHECK(cudaStreamSynchronize(g.stream));
    const double start = Monotonic();
    for (int i = 0; i < n; ++i) {
      const double a = Monotonic();
      if (m.query && previous >= 0) CHECK_CU(cuEventQuery(events[previous]));
      const double b = Monotonic();
      if (m.begin) CHECK_CU(cuEventRecord(events[(2 * i) % 256], s));
      const double c = Monotonic();
      Work(g, 8);
      const double d = Monotonic();
      if (m.mark) {
        previous = (2 * i + 1) % 256;
        CHECK_CU(cuEventRecord(events[previous], s));
      }
      const double e = Monotonic();
      query_s += b - a;
      begin_s += c - b;
      launch_s += d - c;
      mark_s += e - d;
      SpinHost(20e-6);
    }
    const double loop_us = (Monotonic() - start) / n * 1e6;
    CHECK(cudaStreamSynchronize(g.stream));
    if (baseline == 0) baseline = loop_us;
    printf("host | %s | query %.2f us, begin %.2f us, launch %.2f us, mark %.2f us; loop %.2f us per iteration (+%.2f)\n",
           m.name, query_s / n * 1e6, begin_s / n * 1e6, launch_s / n * 1e6, mark_s / n * 1e6, loop_us,
           loop_us - baseline);
  }
  // A query of an event that is still pending (behind a kernel of 50 ms).
  Work(g, 50'000);
  CHECK_CU(cuEventRecord(events[0], s));
  const int q = 2000;
  const double t0 = Monotonic();
  for (int i = 0; i < q; ++i) CHECK_CU(cuEventQuery(events[0]));
  printf("host | query of a pending event | %.2f us\n", (Monotonic() - t0) / q * 1e6);
  CHECK(cudaStreamSynchronize(g.stream));
  // Other ways to learn that a completed kernel is done, each as the first look after it
  // completed (the driver's first look at finished work is what costs): cuStreamQuery of the
  // idle stream; cuEventElapsedTime between a begin and a mark never queried, and after it a
  // query of the mark; and cuEventElapsedTime while the mark is still pending (NOT_READY).
  const int m = n / 4;
  double stream_first_s = 0, elapsed_first_s = 0, query_after_elapsed_s = 0, elapsed_pending_s = 0;
  int not_ready = 0;
  for (int i = 0; i < m; ++i) {
    CHECK_CU(cuEventRecord(events[0], s));
    Work(g, 8);
    CHECK_CU(cuEventRecord(events[1], s));
    SpinHost(40e-6);  // the kernel and the mark are done by now
    float ms = 0;
    const double a = Monotonic();
    if (i % 2 == 0) {
      CHECK_CU(cuStreamQuery(s));
    } else {
      CHECK_CU(cuEventElapsedTime(&ms, events[0], events[1]));
    }
    const double b = Monotonic();
    CHECK_CU(cuEventQuery(events[1]));
    const double c = Monotonic();
    if (i % 2 == 0) {
      stream_first_s += b - a;
    } else {
      elapsed_first_s += b - a;
      query_after_elapsed_s += c - b;
    }
    Work(g, 200);  // a mark still pending
    CHECK_CU(cuEventRecord(events[2], s));
    const double d = Monotonic();
    const CUresult pending = cuEventElapsedTime(&ms, events[0], events[2]);
    elapsed_pending_s += Monotonic() - d;
    if (pending == CUDA_ERROR_NOT_READY) ++not_ready;
    CHECK(cudaStreamSynchronize(g.stream));
  }
  const int half = m / 2;
  printf("host | first look at a completed mark | cuStreamQuery %.2f us; cuEventElapsedTime %.2f us, then cuEventQuery "
         "%.2f us\n", stream_first_s / half * 1e6, elapsed_first_s / half * 1e6, query_after_elapsed_s / half * 1e6);
  printf("host | cuEventElapsedTime to a pending mark | %.2f us, NOT_READY %d of %d\n", elapsed_pending_s / m * 1e6,
         not_ready, m);
  for (CUevent e : events) CHECK_CU(cuEventDestroy(e));
}

// Device time per kernel of `us`, `n` of them queued behind a blocker, an event after each or not.
double QueuedKernelUs(const Gpu& g, double us, int n, bool event_after_each) {
  cudaEvent_t before, after;
  std::vector<cudaEvent_t> marks(event_after_each ? 64 : 0);
  CHECK(cudaEventCreate(&before));
  CHECK(cudaEventCreate(&after));
  for (cudaEvent_t& e : marks) CHECK(cudaEventCreate(&e));
  Work(g, 5'000 + n * us);  // the blocker: every launch below is queued before it ends
  CHECK(cudaEventRecord(before, g.stream));
  for (int i = 0; i < n; ++i) {
    Work(g, us);
    if (event_after_each) CHECK(cudaEventRecord(marks[i % 64], g.stream));
  }
  CHECK(cudaEventRecord(after, g.stream));
  CHECK(cudaStreamSynchronize(g.stream));
  const double per_kernel = Elapsed(before, after) * 1e3 / n;
  CHECK(cudaEventDestroy(before));
  CHECK(cudaEventDestroy(after));
  for (cudaEvent_t e : marks) CHECK(cudaEventDestroy(e));
  return per_kernel;
}

// --- gpu: an event between two queued kernels -------------------------------------------------
void GpuPart(const Gpu& g) {
  for (double us : {5.0, 20.0}) {
    const double plain = QueuedKernelUs(g, us, 400, false);  // 800 commands: within the launch queue
    const double marked = QueuedKernelUs(g, us, 400, true);
    printf("gpu | kernels of %.0f us queued | %.2f us per kernel, %.2f with an event after each: %.2f us per event\n",
           us, plain, marked, marked - plain);
  }
}

// --- bracket: a begin and a mark around one launch --------------------------------------------
void BracketPart(const Gpu& g) {
  cudaEvent_t begin, mark;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&mark));
  for (double us : {20.0, 2'000.0}) {
    const double queued = QueuedKernelUs(g, us, us > 100 ? 20 : 500, false);
    for (bool busy : {false, true}) {
      const int n = us > 100 ? 20 : 200;
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        if (busy) Work(g, 1'000);
        CHECK(cudaEventRecord(begin, g.stream));
        Work(g, us);
        CHECK(cudaEventRecord(mark, g.stream));
        CHECK(cudaStreamSynchronize(g.stream));
        sum += Elapsed(begin, mark) * 1e3;
        SpinHost(50e-6);
      }
      printf("bracket | kernel of %.0f us, stream %s | [begin, mark] %.2f us against %.2f us queued: %+.2f us\n", us,
             busy ? "behind a 1 ms kernel" : "idle", sum / n, queued, sum / n - queued);
    }
  }
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(mark));
}

// --- order: does an event recorded behind a kernel take its time after the kernel? ------------
void OrderPart(const Gpu& g) {
  cudaEvent_t before, behind;
  CHECK(cudaEventCreate(&before));
  CHECK(cudaEventCreate(&behind));
  const double kernel_us = QueuedKernelUs(g, 2'000, 10, false);
  double sum = 0;
  const int n = 10;
  for (int i = 0; i < n; ++i) {
    CHECK(cudaEventRecord(before, g.stream));
    Work(g, 2'000);
    CHECK(cudaEventRecord(behind, g.stream));
    CHECK(cudaStreamSynchronize(g.stream));
    sum += Elapsed(before, behind) * 1e3;
  }
  printf("order | event behind a kernel of %.0f us | %.2f us after the event before it\n", kernel_us, sum / n);
  CHECK(cudaEventDestroy(before));
  CHECK(cudaEventDestroy(behind));
}


// --- util: does GPU-Util count an event's GPU time? -------------------------------------------
// NVML through dlopen, with the few types this part needs (nvml.h is not on every machine).
struct NvmlSample {
  unsigned long long timestamp_us;  // CLOCK_REALTIME
  union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
  } value;
};
using NvmlInit = int (*)();
using NvmlHandleByIndex = int (*)(unsigned, void**);
using NvmlGetSamples = int (*)(void*, int, unsigned long long, int*, unsigned*, NvmlSample*);
constexpr int kNvmlGpuUtilizationSamples = 1;

double RealtimeUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// One chain: `n` kernels of `us`, a begin event before each and / or a mark after each.
void Chain(const Gpu& g, int n, double us, bool begins, bool marks, std::vector<CUevent>& events) {
  CUstream s = reinterpret_cast<CUstream>(g.stream);
  for (int i = 0; i < n; ++i) {
    if (begins) CHECK_CU(cuEventRecord(events[2 * i], s));
    Work(g, us);
    if (marks) CHECK_CU(cuEventRecord(events[2 * i + 1], s));
  }
}

// The NVML entry and device the util part reads.
struct Nvml {
  NvmlGetSamples get_samples = nullptr;
  void* device = nullptr;
};

// GPU-Util over [start_us, end_us] (CLOCK_REALTIME) from the driver's own samples (those lying in
// the window after its first 0.4 s, each covering the ~200 ms before it); -1 when NVML gave none.
double UtilOver(const Nvml& nvml, double start_us, double end_us) {
  SpinHost(0.5);  // the driver's sample of the window's end arrives late
  std::vector<NvmlSample> samples(512);
  unsigned count = samples.size();
  int type = 0;
  if (nvml.get_samples(nvml.device, kNvmlGpuUtilizationSamples, static_cast<unsigned long long>(start_us), &type,
                       &count, samples.data()) != 0) {
    return -1;
  }
  double sum = 0;
  int used = 0;
  for (unsigned i = 0; i < count; ++i) {
    const double t = samples[i].timestamp_us;
    if (t < start_us + 0.4e6 || t > end_us) continue;
    sum += type == 0 ? samples[i].value.d : static_cast<double>(samples[i].value.ui);
    ++used;
  }
  return used > 0 ? sum / used : -1;
}

void UtilPart(const Gpu& g) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (lib == nullptr) {
    printf("util | skipped | libnvidia-ml.so.1 not loadable\n");
    return;
  }
  auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<NvmlHandleByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  Nvml nvml;
  nvml.get_samples = reinterpret_cast<NvmlGetSamples>(dlsym(lib, "nvmlDeviceGetSamples"));
  int device_index = 0;
  CHECK(cudaGetDevice(&device_index));
  if (init == nullptr || by_index == nullptr || nvml.get_samples == nullptr || init() != 0 ||
      by_index(static_cast<unsigned>(device_index), &nvml.device) != 0) {
    printf("util | skipped | NVML did not initialise\n");
    return;
  }
  constexpr double kKernelUs = 5, kSeconds = 3;
  std::vector<CUevent> events(16);
  for (CUevent& e : events) CHECK_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
  cudaEvent_t first, last;
  CHECK(cudaEventCreate(&first));
  CHECK(cudaEventCreate(&last));
  struct Case {
    int kernels;
    double period_us;
  };
  for (const Case& c : {Case{1, 25}, Case{1, 50}, Case{1, 100}, Case{1, 200}, Case{1, 400}, Case{8, 200}}) {
    double busy_us[2] = {0, 0}, span_us[2] = {0, 0}, util[2] = {0, 0}, bracket_us = 0;
    for (int with_events = 0; with_events < 2; ++with_events) {
      // The chain's span on the GPU, from events around it (the host waits for each chain, and
      // sleeps out the period first, so the GPU is as idle before it as below).
      double span_sum = 0, bracket_sum = 0;
      const int spans = 200;
      for (int i = 0; i < spans; ++i) {
        SpinHost(c.period_us * 1e-6);
        CHECK(cudaEventRecord(first, g.stream));
        Chain(g, c.kernels, kKernelUs, with_events, with_events, events);
        CHECK(cudaEventRecord(last, g.stream));
        CHECK(cudaStreamSynchronize(g.stream));
        span_sum += Elapsed(first, last) * 1e3;
        if (with_events) {
          float ms = 0;
          CHECK_CU(cuEventElapsedTime(&ms, events[0], events[2 * c.kernels - 1]));
          bracket_sum += ms * 1e3;
        }
      }
      span_us[with_events] = span_sum / spans;
      if (with_events) bracket_us = bracket_sum / spans;
      // One chain every period_us, the stream synchronised after each.
      const double start_us = RealtimeUs();
      const double until = Monotonic() + kSeconds;
      while (Monotonic() < until) {
        const double period_end = Monotonic() + c.period_us * 1e-6;
        Chain(g, c.kernels, kKernelUs, with_events, with_events, events);
        CHECK(cudaStreamSynchronize(g.stream));
        SpinHost(period_end - Monotonic());
      }
      util[with_events] = UtilOver(nvml, start_us, RealtimeUs());
      busy_us[with_events] = util[with_events] / 100.0 * c.period_us;
    }
    printf("util | %d x %.0f us every %.0f us | no events: span %.2f us, GPU-Util %.1f (%.2f us busy); a begin and a "
           "mark around each kernel: span %.2f us (%.2f per event), GPU-Util %.1f (%.2f us busy, %+.2f); [first begin, "
           "last mark] %.2f us, %+.2f us over the busy time\n",
           c.kernels, kKernelUs, c.period_us, span_us[0], util[0], busy_us[0], span_us[1],
           (span_us[1] - span_us[0]) / (2 * c.kernels), util[1], busy_us[1], busy_us[1] - busy_us[0], bracket_us,
           bracket_us - busy_us[1]);
  }
  CHECK(cudaEventDestroy(first));
  CHECK(cudaEventDestroy(last));
  for (CUevent e : events) CHECK_CU(cuEventDestroy(e));
}

// --- lookup: the launch path's other driver calls ----------------------------------------------
template <typename Call>
double NsPerCall(Call call) {
  constexpr int kCalls = 1'000'000;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const double t0 = Monotonic();
    for (int i = 0; i < kCalls; ++i) call();
    best = std::min(best, (Monotonic() - t0) * 1e9 / kCalls);
  }
  return best;
}

void LookupPart(const Gpu& g) {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUstream stream = reinterpret_cast<CUstream>(g.stream);
  const double current = NsPerCall([&] { CHECK_CU(cuCtxGetCurrent(&ctx)); });
  const double device = NsPerCall([&] { CHECK_CU(cuCtxGetDevice(&dev)); });
  const double capturing = NsPerCall([&] { CHECK_CU(cuStreamIsCapturing(stream, &status)); });
  const double legacy = NsPerCall([&] { CHECK_CU(cuStreamIsCapturing(CU_STREAM_LEGACY, &status)); });
  timespec ts{};
  const double clock = NsPerCall([&] { clock_gettime(CLOCK_MONOTONIC, &ts); });
  printf("lookup | cuCtxGetCurrent | %.1f ns\n", current);
  printf("lookup | cuCtxGetDevice | %.1f ns\n", device);
  printf("lookup | cuStreamIsCapturing, a created stream | %.1f ns\n", capturing);
  printf("lookup | cuStreamIsCapturing, the legacy stream | %.1f ns\n", legacy);
  printf("lookup | clock_gettime(CLOCK_MONOTONIC) | %.1f ns\n", clock);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20'000;
  std::string parts = "host,gpu,bracket,order,util,lookup";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--parts") == 0 && i + 1 < argc) {
      parts = argv[++i];
    } else {
      fprintf(stderr, "usage: event_cost [--iterations N] [--parts host,gpu,bracket,order,util,lookup]\n");
      return 2;
    }
  }
  // The parts asked for, each checked against the known ones.
  const std::vector<std::string> known = {"host", "gpu", "bracket", "order", "util", "lookup"};
  std::vector<std::string> selected;
  for (size_t start = 0; start <= parts.size();) {
    const size_t end = std::min(parts.find(',', start), parts.size());
    selected.push_back(parts.substr(start, end - start));
    if (std::find(known.begin(), known.end(), selected.back()) == known.end()) {
      fprintf(stderr, "event_cost: --parts %s: unknown part '%s' (host, gpu, bracket, order, util, lookup)\n",
              parts.c_str(), selected.back().c_str());
      return 2;
    }
    start = end + 1;
  }
  auto wanted = [&](const char* part) { return std::find(selected.begin(), selected.end(), part) != selected.end(); };
  if (iterations < 100) {
    fprintf(stderr, "event_cost: --iterations %d: at least 100\n", iterations);
    return 2;
  }
  Gpu g;
  Setup(g);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_iterations_per_us = IterationsPerUs(g);
  printf("event_cost: %s, %d SMs, WorkKernel %.1f iterations per us\n", prop.name, g.grid, g_iterations_per_us);
  if (wanted("host")) HostPart(g, iterations);
  if (wanted("gpu")) GpuPart(g);
  if (wanted("bracket")) BracketPart(g);
  if (wanted("order")) OrderPart(g);
  if (wanted("util")) UtilPart(g);
  if (wanted("lookup")) LookupPart(g);
  CHECK(cudaFree(g.sink));
  CHECK(cudaStreamDestroy(g.stream));
  return 0;
}
