// Diagnostic: what does time-slicing between two contexts cost, and does it go away when the
// contexts take turns? Each process runs spin kernels of a fixed device time on every SM.
//
//   turn_probe <cycles> <kernel_us> <start_at> <seconds> free
//       launches back to back (at most two ~2 ms batches in flight), like an unlimited process.
//   turn_probe <cycles> <kernel_us> <start_at> <seconds> turn <board> <id> <nproc> <burst_us> sync|early
//       takes turns through <board> (a shared file holding a turn counter): when the counter says
//       it is this process's turn, it launches <burst_us> of kernels between two events, then
//       hands the turn on after they completed (sync) or right after submitting them (early, so
//       the next process's burst queues behind it and the two contexts overlap briefly).
//
// <start_at> is a CLOCK_MONOTONIC time in seconds: the measured window starts there (after the
// set-up and a warm-up) and lasts <seconds>. Prints one JSON line: kernels per second in the
// window (GPU timeline), and in turn mode the sum of each burst's [begin, end] event interval as a
// fraction of the window ("events"), i.e. what a limiter timing its own bursts would measure.
// Every CUDA return code is checked; the GPU's settings are never changed.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spin_common.cuh"

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: see the comment at the top of turn_probe.cu\n");
    return 2;
  }
  const long long cycles = atoll(argv[1]);
  const double kernel_us = atof(argv[2]);
  const double start_at = atof(argv[3]);
  const double seconds = atof(argv[4]);
  const bool turns = strcmp(argv[5], "turn") == 0;
  if (turns && argc < 11) {
    fprintf(stderr, "turn_probe: turn needs <board> <id> <nproc> <burst_us> sync|early\n");
    return 2;
  }
  std::atomic<long long>* turn = nullptr;
  int id = 0, nproc = 1;
  bool early = false;
  int per_burst = static_cast<int>(2000.0 / kernel_us);
  if (turns) {
    const int fd = open(argv[6], O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, 64) != 0) {
      perror(argv[6]);
      return 2;
    }
    void* map = mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      perror("mmap");
      return 2;
    }
    turn = static_cast<std::atomic<long long>*>(map);
    id = atoi(argv[7]);
    nproc = atoi(argv[8]);
    per_burst = static_cast<int>(atof(argv[9]) / kernel_us + 0.5);
    early = strcmp(argv[10], "early") == 0;
  }
  if (per_burst < 1) per_burst = 1;

  Gpu gpu;
  Setup(gpu);
  const cudaStream_t stream = gpu.stream;
  constexpr int kRing = 4;
  cudaEvent_t begin[kRing], end[kRing], window_start, window_end;
  for (int i = 0; i < kRing; ++i) {
    CHECK(cudaEventCreate(&begin[i]));
    CHECK(cudaEventCreate(&end[i]));
  }
  CHECK(cudaEventCreate(&window_start));
  CHECK(cudaEventCreate(&window_end));

  long long kernels = 0;
  double events_ms = 0;
  bool measuring = false, done = false;
  long long burst = 0;
  while (!done) {
    const double now = Monotonic();
    if (!measuring && now >= start_at) {
      // Everything before is warm-up: start the window on the GPU timeline.
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaEventRecord(window_start, stream));
      measuring = true;
      kernels = 0;
      events_ms = 0;
    }
    if (measuring && now >= start_at + seconds) done = true;
    if (turns) {
      if (done) {
        // Leave the turn to the others for good.
        turn->fetch_add(1);
        break;
      }
      while (turn->load() % nproc != id) {
        if (Monotonic() >= start_at + seconds + 1.0) break;  // the other one has finished
        sched_yield();
      }
    }
    const int slot = static_cast<int>(burst % kRing);
    // In free mode keep at most two bursts in flight (the third waits for the first).
    if (!turns && burst >= 2) CHECK(cudaEventSynchronize(end[(burst - 2) % kRing]));
    CHECK(cudaEventRecord(begin[slot], stream));
    for (int i = 0; i < per_burst; ++i) Launch(gpu, cycles);
    CHECK(cudaEventRecord(end[slot], stream));
    if (measuring) kernels += per_burst;
    ++burst;
    if (turns) {
      if (!early) CHECK(cudaEventSynchronize(end[slot]));
      turn->fetch_add(1);
      if (early) CHECK(cudaEventSynchronize(end[slot]));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, begin[slot], end[slot]));
      if (measuring) events_ms += ms;
    }
  }
  CHECK(cudaEventRecord(window_end, stream));
  CHECK(cudaEventSynchronize(window_end));
  float window_ms = 0;
  CHECK(cudaEventElapsedTime(&window_ms, window_start, window_end));
  printf("{\"mode\": \"%s\", \"id\": %d, \"kernels\": %lld, \"window_ms\": %.3f, \"rate\": %.1f, "
         "\"busy\": %.4f, \"events\": %.4f}\n",
         turns ? (early ? "turn-early" : "turn-sync") : "free", id, kernels, window_ms,
         kernels / (window_ms / 1000.0), kernels * kernel_us / (window_ms * 1000.0),
         events_ms / window_ms);
  return 0;
}
