// Test-only: a discrete-event model of one GPU executing kernels from several contexts
// (processes) and streams, with timing events, for the compute limiter's unit tests.
//
// What it models (the properties the limiter depends on):
//   - Streams are FIFO queues. A command becomes visible to the GPU submit_latency_ns after the
//     host submits it; it starts when it is at the head of its stream and visible.
//   - A kernel occupies the GPU for its duration plus kernel_overhead_ns.
//   - Within a context, the heads of all its streams run concurrently (a kernel's duration is its
//     exclusive run time; concurrent kernels do not slow each other), as far as the SMs hold
//     them: a kernel has a width, the fraction of the GPU's SM resources it occupies while it
//     runs (1/8 for a spin kernel of one 256-thread block per SM on an H200, 1 for a matmul that
//     fills the GPU; 0: unbounded). A head starts when the widths of the running kernels leave
//     room for it, in the order the heads became visible; once started it runs to completion
//     (preempted only by a context switch).
//   - Optionally (hardware_queues) the streams of a context share a few hardware queues, each
//     handing out its commands in submission order.
//   - Contexts time-slice: one is active at a time. The GPU switches when the active context has
//     nothing runnable, or after timeslice_ns while another context has work. A switched-out
//     context's kernels are preempted and resume later; its events also wait (an event is
//     processed, and time-stamped, only while its context is active). Switching to another
//     context than the one that ran last leaves the GPU idle for context_switch_ns.
//   - An event command completes when it reaches the head of its stream (everything before it
//     finished) and its context is active; its timestamp is quantised to event_resolution_ns.
//     With event_gpu_ns > 0 it first occupies its stream (not the SMs) for that long while its
//     context is active, time-stamped at the end, and counts as busy (NVML counts it) but not as
//     work. Re-recording an event re-arms it (cuEventRecord semantics).
//   - Ground truth: per context and for the device, the time during which at least one kernel ran,
//     accumulated in buckets of bucket_ns; and per context the work done: kernel time summed over
//     the kernels running at once (the throughput a limit must cut, whatever the concurrency).
//
// Time only moves forward through AdvanceTo(); NextChangeNs() tells the driver loop when the GPU
// state changes next. Not thread-safe (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <unordered_set>
#include <vector>

#include "compute/gpu_events.h"

namespace vgpu::compute::sim {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct SimGpuParams {
  // GPU time every kernel takes on top of its duration (launch processing; NVML's GPU-Util counts
  // it as busy: back-to-back empty kernels take 1.4 us each on an H200).
  int64_t kernel_overhead_ns = 1'400;
  int64_t submit_latency_ns = 3'000;
  // > 0: each command's latency is submit_latency_ns plus a draw uniform in [0, this), from
  // jitter_seed (on an H200 the tenth percentile of a kernel's start came ~5 us before the
  // median, docs/benchmarks.md 2026-11-27). 0: every command takes submit_latency_ns.
  int64_t submit_jitter_ns = 0;
  uint64_t jitter_seed = 1;
  int64_t timeslice_ns = 2'000'000;
  // GPU time lost when another context than the last one gets the GPU (0: free switches). On an
  // H200, two contexts of 50 us kernels time-slicing did 93% of one context's work, and handing
  // the GPU from one idle-after-burst context to the other left it idle ~125 us
  // (bench/compute/turn_probe.sh).
  int64_t context_switch_ns = 0;
  int64_t event_resolution_ns = 500;
  // GPU time an event takes on its stream (above). On an H200 ~2 us between two queued kernels
  // (bench/compute/event_cost.cu, 2026-11-27). 0 (the default): events take none.
  int64_t event_gpu_ns = 0;
  int64_t bucket_ns = 1'000'000;
  // Hardware work queues per context (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; 0: one per
  // stream). The n-th stream of a context feeds queue n % hardware_queues; a queue hands out its
  // commands in submission order, so a command waiting for its own stream's previous one holds
  // back the later commands of the other streams in its queue (CUDA's false dependencies between
  // more streams than connections).
  int hardware_queues = 0;
};

class SimGpu {
 public:
  explicit SimGpu(const SimGpuParams& params = SimGpuParams());

  int AddContext();
  int AddStream(int context);  // stream ids are global

  // Enqueues kernels at host time `host_ns` (a graph launch is several kernels in a row; a graph
  // with branches is several streams' worth, see the harness). `width`: see above.
  void Launch(int stream, int64_t host_ns, int64_t duration_ns, double width = 0);
  void LaunchGraph(int stream, int64_t host_ns, const std::vector<int64_t>& kernels, double width = 0);

  EventId CreateEvent(int context);
  bool RecordEvent(EventId event, int stream, int64_t host_ns);
  EventState QueryEvent(EventId event) const;
  bool ElapsedMs(EventId from, EventId to, float* ms) const;
  // Timestamp of a completed event (tests).
  int64_t EventTime(EventId event) const;

  void AdvanceTo(int64_t time);
  int64_t NextChangeNs() const;
  int64_t now() const { return now_; }
  const SimGpuParams& params() const { return params_; }

  int PendingCommands(int stream) const;  // commands not finished (kernels and events)
  int PendingKernels(int stream) const;   // ... of which kernels
  bool StreamDrained(int stream) const { return PendingCommands(stream) == 0; }

  // Ground truth over [from, to) (bucket-aligned for exact results).
  int64_t ContextBusyNs(int context, int64_t from, int64_t to) const;
  int64_t DeviceBusyNs(int64_t from, int64_t to) const;
  // Kernel time done by the context's kernels over [from, to), summed over concurrent kernels.
  int64_t ContextWorkNs(int context, int64_t from, int64_t to) const;

 private:
  // When a command submitted at host_ns becomes visible (submit latency, jitter).
  int64_t VisibleNs(int64_t host_ns);
  struct Command {
    bool is_event;
    int64_t visible_ns;
    int64_t remaining_ns;     // kernels
    EventId event;            // events
    uint64_t generation;      // events: which record of the event this is
    double width = 0;         // kernels: fraction of the SMs it occupies (0: unbounded)
    bool started = false;     // kernels: holds its SMs and progresses while its context runs;
                              // events: being processed (event_gpu_ns)
    uint64_t seq = 0;         // submission order (hardware queues hand commands out in it)
  };
  struct Stream {
    int context;
    std::deque<Command> queue;
    int hardware_queue = 0;
  };
  struct Context {
    std::vector<int> streams;
  };
  struct Event {
    int context;
    bool recorded = false;
    bool done = false;
    int64_t time = 0;
    uint64_t generation = 0;
  };

  bool HeadRunnable(const Stream& s) const;
  bool HeldBackByQueue(const Stream& s) const;
  void Push(int stream, Command command);
  bool HeadRunning(const Stream& s) const;
  bool HeadProcessingEvent(const Stream& s) const;
  bool StartHeads();
  bool ContextReady(int context) const;
  bool ContextBusy(int context) const;
  bool SettleActive();
  void ChooseContext();
  void Settle();
  void Progress(int64_t dt);
  void AddBusy(std::vector<int64_t>* buckets, int64_t from, int64_t to);
  static int64_t SumBuckets(const std::vector<int64_t>& buckets, int64_t bucket_ns, int64_t from,
                            int64_t to);

  SimGpuParams params_;
  int64_t now_ = 0;
  int active_ = -1;
  int64_t active_since_ = 0;
  int last_active_ = -1;       // the context that ran last (switching away from it costs)
  int64_t switch_until_ = 0;   // the active context starts running here
  uint64_t next_seq_ = 1;
  uint64_t jitter_state_ = 0;  // splitmix64 state for submit_jitter_ns
  std::vector<Stream> streams_;
  std::vector<Context> contexts_;
  std::vector<Event> events_;
  std::vector<std::vector<int64_t>> context_busy_;
  std::vector<std::vector<int64_t>> context_work_;
  std::vector<int64_t> device_busy_;
};

// GpuEventOps over a SimGpu for one context. Stream keys are SimGpu stream ids. Each call costs
// host time: it advances *cursor (the calling simulated thread's clock) by the configured cost,
// and commands are stamped with the cursor.
// On an H200 (driver 580, bench/compute/event_cost.cu): cuEventRecord 1.0-1.2 us, cuEventQuery
// 0.11 us while the event is pending and 1.5 us the first time it finds it complete (later
// queries of that record cost the pending price), cuEventElapsedTime_v2 0.1-0.3 us whether or not
// the event is complete (QueryAgainst costs elapsed_ns and is no first look).
struct SimOpCosts {
  int64_t record_ns = 1'200;
  int64_t query_ns = 120;        // pending, or complete and already seen so
  int64_t elapsed_ns = 100;
  int64_t query_done_ns = 1'500; // the first query that finds a record complete
};

class SimEventOps final : public GpuEventOps {
 public:
  SimEventOps(SimGpu* gpu, int context, const SimOpCosts& costs) : gpu_(gpu), context_(context), costs_(costs) {}
  void set_cursor(int64_t* cursor) { cursor_ = cursor; }
  bool Create(EventId* event) override;
  void Destroy(EventId) override {}
  bool Record(EventId event, StreamKey stream) override;
  EventState Query(EventId event) override;
  EventState QueryAgainst(EventId reference, EventId event, float* elapsed_ms) override;
  bool ElapsedMs(EventId from, EventId to, float* ms) override;
  int records() const { return records_; }

 private:
  void Spend(int64_t ns) {
    if (cursor_ != nullptr) *cursor_ += ns;
  }
  SimGpu* gpu_;
  int context_;
  SimOpCosts costs_;
  int64_t* cursor_ = nullptr;
  int records_ = 0;
  std::unordered_set<EventId> seen_done_;  // events whose current record a query found complete
};

}  // namespace vgpu::compute::sim
