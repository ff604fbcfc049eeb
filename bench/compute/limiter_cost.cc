// What the compute limiter's own bookkeeping costs a launching thread, without a GPU: the
// ComputeLimiter (BusyTracker + Controller) driven launch by launch on a fake clock, with event
// operations that cost nothing, so the wall time measured is the limiter's code alone (locks,
// lookups, arithmetic, the busy union and ring), not the driver calls it makes. The driver's
// share is counted instead: marks and queries per launch, to be priced with the per-call costs
// measured on a GPU (bench/compute/event_cost.cu; on an H200, 2026-11-27: cuEventRecord
// 1.0-1.2 us, cuEventQuery 0.11 us while pending and 1.5 us the first time it finds the event
// complete).
//
//   limiter_cost [--launches N]
//
// Scenarios (a limit of 99, so that little is throttled; one launch per 6.7 us of fake time):
//   deep       16 streams round-robin, each draining a launch per 110 us (16 streams of 50 us
//              kernels from one thread, 7.5 at once: queues that never run dry)
//   idle       1 stream whose launches drain in 2 us (a launcher slower than its kernels: every
//              launch starts an idle stream)
//   two-procs  "deep" in two trackers sharing a busy ring (two processes of one container)
// Prints one line per scenario: ns per launch (best of three), marks and queries per launch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute/busy_tracker.h"
#include "compute/compute_state.h"
#include "compute/controller.h"
#include "compute/limiter.h"

namespace {

using namespace vgpu::compute;

constexpr int64_t kLaunchNs = 6'700;  // fake time between launches (one host thread's rate)

// Streams as queues that drain one launch per `launch_cost_ns` of fake time; an event completes
// when everything launched on its stream before it has.
class FakeEvents final : public GpuEventOps {
 public:
  FakeEvents(const int64_t* now, int64_t launch_cost_ns) : now_(now), cost_ns_(launch_cost_ns) {}
  void Launch(StreamKey stream) {
    int64_t& until = BusyUntil(stream);
    until = std::max(until, *now_) + cost_ns_;
  }
  bool Create(EventId* event) override {
    done_at_.push_back(0);
    *event = done_at_.size();
    return true;
  }
  void Destroy(EventId) override {}
  bool Record(EventId event, StreamKey stream) override {
    done_at_[event - 1] = std::max(BusyUntil(stream), *now_);
    return true;
  }
  EventState Query(EventId event) override {
    return *now_ >= done_at_[event - 1] ? EventState::kReady : EventState::kNotReady;
  }
  bool ElapsedMs(EventId from, EventId to, float* ms) override {
    *ms = static_cast<float>(done_at_[to - 1] - done_at_[from - 1]) / 1e6f;
    return true;
  }

 private:
  int64_t& BusyUntil(StreamKey stream) {
    if (busy_until_.size() <= stream) busy_until_.resize(stream + 1, 0);
    return busy_until_[stream];
  }
  const int64_t* now_;
  int64_t cost_ns_;
  std::vector<int64_t> done_at_;
  std::vector<int64_t> busy_until_;
};

struct Process {
  Process(ComputeShareState* state, BusyRing* ring, const int64_t* now, int64_t launch_cost_ns)
      : events(now, launch_cost_ns),
        controller(state, nullptr, nullptr, ControllerOptions{}, ComputeLimits::FromPercent(99, 0, 1)),
        tracker(&events, BusyTrackerOptions{}, ring),
        limiter(&controller, &tracker) {}
  FakeEvents events;
  Controller controller;
  BusyTracker tracker;
  ComputeLimiter limiter;
};

struct Result {
  double ns_per_launch = 0;
  double marks = 0;
  double queries = 0;
  double poll_queries = 0;
};

// One run of `launches` launches spread over the processes and their streams.
Result Run(int processes, int streams, int64_t launch_cost_ns, int launches) {
  int64_t now = 1'000'000'000;
  ComputeShareState state{};
  BusyRing ring{};
  std::vector<std::unique_ptr<Process>> procs;
  for (int p = 0; p < processes; ++p) {
    procs.push_back(std::make_unique<Process>(&state, processes > 1 ? &ring : nullptr, &now, launch_cost_ns));
  }
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  for (int i = 0; done < launches; ++i) {
    Process& p = *procs[i % processes];
    LaunchTicket ticket;
    now += kLaunchNs / processes;
    const auto stream = static_cast<StreamKey>(1 + (i / processes) % streams);
    if (p.limiter.BeforeLaunch(stream, now, &ticket) > 0) continue;  // waits (fake time goes on)
    p.events.Launch(stream);
    p.limiter.AfterLaunch(ticket, true, now);
    ++done;
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  Result r;
  r.ns_per_launch = ns / launches;
  for (const auto& p : procs) {
    const TrackerStats s = p->tracker.stats();
    r.marks += static_cast<double>(s.marks) / launches;
    r.queries += static_cast<double>(s.queries) / launches;
    r.poll_queries += static_cast<double>(s.poll_queries) / launches;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int launches = 2'000'000;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--launches") == 0 && i + 1 < argc) {
      launches = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: limiter_cost [--launches N]\n");
      return 2;
    }
  }
  if (launches <= 0) {
    fprintf(stderr, "limiter_cost: --launches must be > 0\n");
    return 2;
  }
  struct Scenario {
    const char* name;
    int processes, streams;
    int64_t launch_cost_ns;
  };
  // 16 streams of 50 us kernels, 7.5 at once: each stream drains a launch per ~107 us while one
  // thread launches on it every 16 x 6.7 = 107 us; 110 us keeps their queues from running dry.
  const Scenario scenarios[] = {
      {"deep (16 streams, each draining a launch per 110 us)", 1, 16, 110'000},
      {"idle (1 stream, a launch drains in 2 us)", 1, 1, 2'000},
      {"two-procs (deep, two trackers sharing a busy ring)", 2, 16, 110'000},
  };
  printf("limiter bookkeeping per launch, %d launches, best of 3 (driver calls not included)\n", launches);
  for (const Scenario& s : scenarios) {
    Result best;
    best.ns_per_launch = 1e18;
    for (int round = 0; round < 3; ++round) {
      const Result r = Run(s.processes, s.streams, s.launch_cost_ns, launches);
      if (r.ns_per_launch < best.ns_per_launch) best = r;
    }
    printf("%-66s %7.1f ns  marks %.3f  queries %.3f (polls %.3f) per launch\n", s.name, best.ns_per_launch,
           best.marks, best.queries, best.poll_queries);
  }
  return 0;
}
