#include "compute/sim_model.h"

#include <algorithm>
#include <limits>

#include "compute/splitmix.h"

namespace vgpu::compute::sim {

SimGpu::SimGpu(const SimGpuParams& params) : params_(params) { jitter_state_ = params.jitter_seed; }

int SimGpu::AddContext() {
  contexts_.emplace_back();
  context_busy_.emplace_back();
  context_work_.emplace_back();
  return static_cast<int>(contexts_.size()) - 1;
}

int SimGpu::AddStream(int context) {
  const int index = static_cast<int>(contexts_[context].streams.size());
  streams_.push_back(Stream{context, {}, params_.hardware_queues > 0 ? index % params_.hardware_queues : index});
  int id = static_cast<int>(streams_.size()) - 1;
  contexts_[context].streams.push_back(id);
  return id;
}

void SimGpu::Push(int stream, Command command) {
  command.seq = next_seq_++;
  streams_[stream].queue.push_back(command);
}

int64_t SimGpu::VisibleNs(int64_t host_ns) {
  int64_t latency = params_.submit_latency_ns;
  if (params_.submit_jitter_ns > 0) {
    const uint64_t z = SplitMix64(jitter_state_);
    jitter_state_ += kSplitMixGamma;
    latency += static_cast<int64_t>(z % static_cast<uint64_t>(params_.submit_jitter_ns));
  }
  return std::max(host_ns + latency, now_);
}

void SimGpu::Launch(int stream, int64_t host_ns, int64_t duration_ns, double width) {
  int64_t visible = VisibleNs(host_ns);
  int64_t gpu_time = std::max<int64_t>(duration_ns, 0) + params_.kernel_overhead_ns;
  Push(stream, Command{false, visible, gpu_time, 0, 0, std::clamp(width, 0.0, 1.0)});
}

void SimGpu::LaunchGraph(int stream, int64_t host_ns, const std::vector<int64_t>& kernels, double width) {
  for (int64_t k : kernels) Launch(stream, host_ns, k, width);
}

EventId SimGpu::CreateEvent(int context) {
  events_.push_back(Event{context});
  return static_cast<EventId>(events_.size());  // ids start at 1
}

bool SimGpu::RecordEvent(EventId event, int stream, int64_t host_ns) {
  if (event == 0 || event > events_.size() || stream < 0 ||
      stream >= static_cast<int>(streams_.size())) {
    return false;
  }
  Event& e = events_[event - 1];
  if (e.context != streams_[stream].context) return false;
  e.recorded = true;
  e.done = false;
  ++e.generation;
  int64_t visible = VisibleNs(host_ns);
  Push(stream, Command{true, visible, std::max<int64_t>(params_.event_gpu_ns, 0), event, e.generation});
  return true;
}

EventState SimGpu::QueryEvent(EventId event) const {
  if (event == 0 || event > events_.size()) return EventState::kError;
  const Event& e = events_[event - 1];
  if (!e.recorded) return EventState::kReady;  // cuEventQuery on a never-recorded event
  return e.done ? EventState::kReady : EventState::kNotReady;
}

bool SimGpu::ElapsedMs(EventId from, EventId to, float* ms) const {
  if (from == 0 || to == 0 || from > events_.size() || to > events_.size()) return false;
  const Event& a = events_[from - 1];
  const Event& b = events_[to - 1];
  if (!a.done || !b.done) return false;
  *ms = static_cast<float>(static_cast<double>(b.time - a.time) / 1e6);  // float, as CUDA's
  return true;
}

int64_t SimGpu::EventTime(EventId event) const { return events_[event - 1].time; }

int SimGpu::PendingCommands(int stream) const {
  return static_cast<int>(streams_[stream].queue.size());
}

int SimGpu::PendingKernels(int stream) const {
  int kernels = 0;
  for (const Command& c : streams_[stream].queue) kernels += c.is_event ? 0 : 1;
  return kernels;
}

// --- Execution -----------------------------------------------------------------------------

bool SimGpu::HeadRunnable(const Stream& s) const {
  if (s.queue.empty() || s.queue.front().visible_ns > now_) return false;
  const Command& head = s.queue.front();
  return head.started || !HeldBackByQueue(s);  // what was handed out keeps going
}

// Whether another stream of the same hardware queue has a command submitted before this stream's
// head that its queue has not handed out yet (a kernel not started, an event not processed).
bool SimGpu::HeldBackByQueue(const Stream& s) const {
  if (params_.hardware_queues <= 0) return false;
  const uint64_t seq = s.queue.front().seq;
  for (int id : contexts_[s.context].streams) {
    const Stream& t = streams_[id];
    if (&t == &s || t.hardware_queue != s.hardware_queue || t.queue.empty()) continue;
    const Command* first = &t.queue.front();
    if (first->started) first = t.queue.size() > 1 ? &t.queue[1] : nullptr;
    if (first != nullptr && first->seq < seq) return true;
  }
  return false;
}

bool SimGpu::ContextReady(int context) const {
  for (int id : contexts_[context].streams) {
    if (HeadRunnable(streams_[id])) return true;
  }
  return false;
}

bool SimGpu::HeadRunning(const Stream& s) const {
  return HeadRunnable(s) && !s.queue.front().is_event && s.queue.front().started;
}

// An event at its stream's head still taking its GPU time (event_gpu_ns).
bool SimGpu::HeadProcessingEvent(const Stream& s) const {
  return HeadRunnable(s) && s.queue.front().is_event && s.queue.front().remaining_ns > 0;
}

// A kernel runs or an event is processed: busy, as NVML counts it.
bool SimGpu::ContextBusy(int context) const {
  for (int id : contexts_[context].streams) {
    if (HeadRunning(streams_[id]) || HeadProcessingEvent(streams_[id])) return true;
  }
  return false;
}

// Starts the active context's waiting kernel heads that the SMs have room for, in the order they
// became visible (a head that does not fit holds back the later ones). Returns whether any started.
bool SimGpu::StartHeads() {
  if (active_ < 0 || now_ < switch_until_) return false;
  double used = 0;
  std::vector<Command*> waiting;
  for (int id : contexts_[active_].streams) {
    Stream& s = streams_[id];
    if (!HeadRunnable(s) || s.queue.front().is_event) continue;
    Command& head = s.queue.front();
    if (head.started) {
      used += head.width;
    } else {
      waiting.push_back(&head);
    }
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const Command* a, const Command* b) { return a->visible_ns < b->visible_ns; });
  bool started = false;
  for (Command* head : waiting) {
    if (head->width > 0 && used + head->width > 1.0 + 1e-9) break;
    head->started = true;
    used += head->width;
    started = true;
  }
  return started;
}

// Completes what the active context can complete right now. Returns whether anything changed.
bool SimGpu::SettleActive() {
  if (active_ < 0 || now_ < switch_until_) return false;
  bool changed = false;
  for (int id : contexts_[active_].streams) {
    Stream& s = streams_[id];
    while (HeadRunnable(s)) {
      Command& head = s.queue.front();
      if (head.is_event) {
        if (head.remaining_ns > 0) break;  // still taking its GPU time
        Event& e = events_[head.event - 1];
        if (e.generation == head.generation) {
          e.done = true;
          e.time = now_ / params_.event_resolution_ns * params_.event_resolution_ns;
        }
      } else if (head.remaining_ns > 0) {
        break;
      }
      s.queue.pop_front();
      changed = true;
    }
  }
  return changed;
}

// Round-robin among ready contexts: switch when the active one has nothing to run, or when its
// time slice is over and another one is waiting.
void SimGpu::ChooseContext() {
  int n = static_cast<int>(contexts_.size());
  bool active_ready = active_ >= 0 && ContextReady(active_);
  bool slice_over = active_ready && now_ - active_since_ >= params_.timeslice_ns;
  if (active_ready && !slice_over) return;
  int start = active_ < 0 ? 0 : active_ + 1;
  for (int i = 0; i < n; ++i) {
    int c = (start + i) % n;
    if (c != active_ && ContextReady(c)) {
      active_ = c;
      active_since_ = now_;
      if (last_active_ >= 0 && c != last_active_) switch_until_ = now_ + params_.context_switch_ns;
      last_active_ = c;
      return;
    }
  }
  if (!active_ready) active_ = -1;
  else active_since_ = now_;  // nobody else waits: the slice restarts
}

void SimGpu::Settle() {
  for (int guard = 0; guard < 64; ++guard) {
    bool changed = SettleActive();
    int before = active_;
    ChooseContext();
    changed = StartHeads() || changed;
    if (!changed && before == active_) return;
  }
}

int64_t SimGpu::NextChangeNs() const {
  int64_t next = kNever;
  bool others_waiting = false;
  for (const Stream& s : streams_) {
    if (s.queue.empty()) continue;
    const Command& head = s.queue.front();
    if (head.visible_ns > now_) {
      next = std::min(next, head.visible_ns);
    } else if (s.context == active_ && !head.is_event && head.started) {
      next = std::min(next, now_ + head.remaining_ns);
    } else if (s.context == active_ && HeadProcessingEvent(s)) {
      next = std::min(next, now_ + head.remaining_ns);
    } else if (s.context != active_) {
      others_waiting = true;
    }
  }
  if (active_ >= 0 && others_waiting) {
    next = std::min(next, std::max(active_since_ + params_.timeslice_ns, now_ + 1));
  }
  if (switch_until_ > now_) next = std::min(next, switch_until_);
  return next;
}

void SimGpu::Progress(int64_t dt) {
  if (dt <= 0) return;
  if (active_ >= 0 && now_ >= switch_until_ && ContextBusy(active_)) {
    AddBusy(&context_busy_[active_], now_, now_ + dt);
    AddBusy(&device_busy_, now_, now_ + dt);
    for (int id : contexts_[active_].streams) {
      Stream& s = streams_[id];
      if (HeadRunning(s)) {
        s.queue.front().remaining_ns -= dt;
        AddBusy(&context_work_[active_], now_, now_ + dt);
      } else if (HeadProcessingEvent(s)) {
        s.queue.front().remaining_ns -= dt;  // busy, not work
        s.queue.front().started = true;
      }
    }
  }
  now_ += dt;
}

void SimGpu::AdvanceTo(int64_t time) {
  Settle();
  while (now_ < time) {
    int64_t next = std::min(NextChangeNs(), time);
    Progress(next - now_);
    Settle();
  }
}

// --- Ground truth --------------------------------------------------------------------------

void SimGpu::AddBusy(std::vector<int64_t>* buckets, int64_t from, int64_t to) {
  int64_t b = params_.bucket_ns;
  while (from < to) {
    size_t index = static_cast<size_t>(from / b);
    if (buckets->size() <= index) buckets->resize(index + 1024, 0);
    int64_t end = std::min(to, (from / b + 1) * b);
    (*buckets)[index] += end - from;
    from = end;
  }
}

int64_t SimGpu::SumBuckets(const std::vector<int64_t>& buckets, int64_t bucket_ns, int64_t from,
                           int64_t to) {
  int64_t sum = 0;
  for (int64_t i = from / bucket_ns; i * bucket_ns < to; ++i) {
    if (i >= 0 && static_cast<size_t>(i) < buckets.size()) sum += buckets[i];
  }
  return sum;
}

int64_t SimGpu::ContextBusyNs(int context, int64_t from, int64_t to) const {
  return SumBuckets(context_busy_[context], params_.bucket_ns, from, to);
}

int64_t SimGpu::DeviceBusyNs(int64_t from, int64_t to) const {
  return SumBuckets(device_busy_, params_.bucket_ns, from, to);
}

int64_t SimGpu::ContextWorkNs(int context, int64_t from, int64_t to) const {
  return SumBuckets(context_work_[context], params_.bucket_ns, from, to);
}

// --- GpuEventOps ---------------------------------------------------------------------------

bool SimEventOps::Create(EventId* event) {
  *event = gpu_->CreateEvent(context_);
  return true;
}

bool SimEventOps::Record(EventId event, StreamKey stream) {
  int64_t at = cursor_ != nullptr ? *cursor_ : gpu_->now();
  Spend(costs_.record_ns);
  ++records_;
  seen_done_.erase(event);
  return gpu_->RecordEvent(event, static_cast<int>(stream), at);
}

EventState SimEventOps::Query(EventId event) {
  const EventState state = gpu_->QueryEvent(event);
  const bool first_done = state == EventState::kReady && seen_done_.insert(event).second;
  Spend(first_done ? costs_.query_done_ns : costs_.query_ns);
  return state;
}

EventState SimEventOps::QueryAgainst(EventId reference, EventId event, float* elapsed_ms) {
  Spend(costs_.elapsed_ns);
  *elapsed_ms = std::numeric_limits<float>::quiet_NaN();
  const EventState done = gpu_->QueryEvent(reference);
  if (done != EventState::kReady) return EventState::kError;  // the reference must be complete
  const EventState state = gpu_->QueryEvent(event);
  if (state == EventState::kReady && !gpu_->ElapsedMs(reference, event, elapsed_ms)) {
    *elapsed_ms = std::numeric_limits<float>::quiet_NaN();
  }
  return state;
}

bool SimEventOps::ElapsedMs(EventId from, EventId to, float* ms) {
  Spend(costs_.elapsed_ns);
  return gpu_->ElapsedMs(from, to, ms);
}

}  // namespace vgpu::compute::sim
