// Spin-kernel workload for bench/compute_accuracy.py: kernels of a fixed device time that occupy
// every SM, launched back to back from one stream with no host synchronisation in the steady state
// (at most two ~10 ms batches in flight, flow control through events), so the GPU stays ~100% busy
// natively even for 5 µs kernels (the host launches faster than the GPU retires them).
//
//   spin calibrate <kernel_us>
//       finds the clock64() cycle count whose back-to-back device time per kernel is <kernel_us>;
//       prints one JSON line {"cycles": .., "dev_us": .., "cycles_per_us": ..}
//   spin run <cycles> <dev_us> <warmup_s> <measure_s> [--calibrate] [--barrier DIR NAME]
//       runs for warmup_s, then measures for measure_s; throughput from CUDA events (GPU
//       timeline, no sync at the window's start). --calibrate re-measures the device time per
//       kernel at the end (native runs only: under a limit the launches are throttled) and reports
//       the GPU-busy fraction rate x dev_time. --barrier: after the warm-up, create DIR/ready.NAME
//       and keep warming up until DIR/go exists (it holds a CLOCK_MONOTONIC start time, seconds)
//       and that time has come. Prints one JSON line.
//
// Device time per kernel is measured behind a long "blocker" kernel: all N launches are queued
// while the blocker runs, so [event before, event after] / N is pure GPU time per kernel whatever
// the host's launch rate. Every CUDA return code is checked; clocks are never changed.
#include <cuda_runtime.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "spin_common.cuh"

// Device time of one kernel of `cycles` when kernels run back to back, in µs. Returns a negative
// value when the host could not queue all launches while the blocker ran (result unreliable).
static double DeviceTimeUs(Gpu& g, long long cycles, long long blocker_cycles, int n, double blocker_s) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  Launch(g, blocker_cycles);
  CHECK(cudaEventRecord(e0, g.stream));
  const double t0 = Monotonic();
  for (int i = 0; i < n; ++i) Launch(g, cycles);
  const double submit_s = Monotonic() - t0;
  CHECK(cudaEventRecord(e1, g.stream));
  CHECK(cudaEventSynchronize(e1));
  const double us = Elapsed(e0, e1) * 1000.0 / n;
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return submit_s < 0.8 * blocker_s ? us : -us;
}

static int QueuedCount(double dev_us) {  // ~20 ms of kernels, at most 1000 launches
  int n = static_cast<int>(20000.0 / dev_us);
  if (n < 10) n = 10;
  if (n > 1000) n = 1000;
  return n;
}

// Returns {cycles, dev_us} for a target device time per kernel.
static void Calibrate(Gpu& g, double target_us, long long* cycles_out, double* dev_us_out, double* cpu_out) {
  const double cpu = CyclesPerUs(g);
  const double blocker_s = 0.1;
  const long long blocker = static_cast<long long>(cpu * blocker_s * 1e6);
  long long cycles = static_cast<long long>(cpu * target_us);
  double dev_us = 0;
  const int n = QueuedCount(target_us);
  for (int iter = 0; iter < 4; ++iter) {
    dev_us = DeviceTimeUs(g, cycles, blocker, n, blocker_s);
    if (dev_us < 0) {
      fprintf(stderr, "spin: calibration: host could not queue %d launches within the blocker\n", n);
      dev_us = -dev_us;
    }
    if (std::fabs(dev_us - target_us) < 0.01 * target_us) break;
    // Per-kernel overhead is fixed: move the spinning part by the difference.
    cycles += static_cast<long long>((target_us - dev_us) * cpu);
    if (cycles < 0) cycles = 0;
  }
  *cycles_out = cycles;
  *dev_us_out = dev_us;
  *cpu_out = cpu;
}

static int Run(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: spin run <cycles> <dev_us> <warmup_s> <measure_s> [--calibrate] [--barrier DIR NAME]\n");
    return 2;
  }
  const long long cycles = atoll(argv[2]);
  const double dev_us = atof(argv[3]);
  const double warmup_s = atof(argv[4]);
  const double measure_s = atof(argv[5]);
  bool calibrate = false;
  std::string barrier_dir, barrier_name;
  for (int i = 6; i < argc; ++i) {
    if (strcmp(argv[i], "--calibrate") == 0) {
      calibrate = true;
    } else if (strcmp(argv[i], "--barrier") == 0 && i + 2 < argc) {
      barrier_dir = argv[i + 1];
      barrier_name = argv[i + 2];
      i += 2;
    } else {
      fprintf(stderr, "spin: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (dev_us <= 0 || warmup_s < 0 || measure_s <= 0) {
    fprintf(stderr, "spin: bad arguments\n");
    return 2;
  }
  const double t_launch = Monotonic();
  Gpu g;
  Setup(g);
  const int batch = static_cast<int>(std::fmax(1.0, std::round(10000.0 / dev_us)));  // ~10 ms of work
  constexpr int kRing = 3;  // wait for batch i-2 after submitting batch i: >= 1 batch always queued
  cudaEvent_t ring[kRing];
  for (auto& e : ring) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t ev_a, ev_b;
  CHECK(cudaEventCreate(&ev_a));
  CHECK(cudaEventCreate(&ev_b));

  const double t_ready = Monotonic();
  long long submitted = 0;  // kernels
  long long batches = 0;
  auto submit_batch = [&]() {
    for (int k = 0; k < batch; ++k) Launch(g, cycles);
    submitted += batch;
    CHECK(cudaEventRecord(ring[batches % kRing], g.stream));
    ++batches;
    if (batches >= 2) CHECK(cudaEventSynchronize(ring[(batches - 2) % kRing]));
  };

  // Warm-up (and barrier).
  const double warm_end = t_ready + warmup_s;
  bool ready_written = barrier_dir.empty();
  double go_at = -1;
  while (true) {
    submit_batch();
    const double now = Monotonic();
    if (now < warm_end) continue;
    if (barrier_dir.empty()) break;
    if (!ready_written) {
      const std::string ready = barrier_dir + "/ready." + barrier_name;
      FILE* f = fopen(ready.c_str(), "w");
      if (!f) {
        fprintf(stderr, "spin: cannot create %s: %s\n", ready.c_str(), strerror(errno));
        return 2;
      }
      fclose(f);
      ready_written = true;
    }
    if (go_at < 0) go_at = ReadGoTime((barrier_dir + "/go").c_str());
    if (go_at >= 0 && now >= go_at) break;
    if (now > warm_end + 120) {
      fprintf(stderr, "spin: barrier timeout\n");
      return 2;
    }
  }

  // Measurement: from ev_a (behind the last warm-up batch) to ev_b, on the GPU's timeline.
  CHECK(cudaEventRecord(ev_a, g.stream));
  const long long at_a = submitted;
  const double t_start = Monotonic();
  while (Monotonic() - t_start < measure_s) submit_batch();
  CHECK(cudaEventRecord(ev_b, g.stream));
  const long long units = submitted - at_a;
  CHECK(cudaEventSynchronize(ev_b));
  const double t_end = Monotonic();
  const double seconds = Elapsed(ev_a, ev_b) / 1000.0;
  CHECK(cudaStreamSynchronize(g.stream));

  double dev_check = dev_us;
  bool dev_ok = true;
  if (calibrate) {
    const double cpu = CyclesPerUs(g);
    const double blocker_s = 0.1;
    dev_check = DeviceTimeUs(g, cycles, static_cast<long long>(cpu * blocker_s * 1e6), QueuedCount(dev_us), blocker_s);
    if (dev_check < 0) {
      dev_ok = false;
      dev_check = -dev_check;
    }
  }
  const double rate = units / seconds;
  printf("{\"units\": %lld, \"seconds\": %.6f, \"rate\": %.6f, \"dev_unit_s\": %.9f, \"dev_unit_ok\": %s, "
         "\"busy\": %.5f, \"t_launch\": %.6f, \"t_ready\": %.6f, \"t_start\": %.6f, \"t_end\": %.6f, "
         "\"batch\": %d}\n",
         units, seconds, rate, dev_check * 1e-6, dev_ok ? "true" : "false", rate * dev_check * 1e-6, t_launch,
         t_ready, t_start, t_end, batch);
  fflush(stdout);
  for (auto& e : ring) CHECK(cudaEventDestroy(e));
  CHECK(cudaEventDestroy(ev_a));
  CHECK(cudaEventDestroy(ev_b));
  CHECK(cudaFree(g.sink));
  CHECK(cudaStreamDestroy(g.stream));
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "calibrate") == 0) {
    const double target_us = atof(argv[2]);
    if (target_us <= 0) {
      fprintf(stderr, "spin: bad kernel time\n");
      return 2;
    }
    Gpu g;
    Setup(g);
    long long cycles = 0;
    double dev_us = 0, cpu = 0;
    Calibrate(g, target_us, &cycles, &dev_us, &cpu);
    printf("{\"cycles\": %lld, \"dev_us\": %.4f, \"cycles_per_us\": %.3f, \"sms\": %d}\n", cycles, dev_us, cpu, g.grid);
    CHECK(cudaFree(g.sink));
    CHECK(cudaStreamDestroy(g.stream));
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "run") == 0) return Run(argc, argv);
  fprintf(stderr,
          "usage: spin calibrate <kernel_us>\n"
          "       spin run <cycles> <dev_us> <warmup_s> <measure_s> [--calibrate] [--barrier DIR NAME]\n");
  return 2;
}
