// Clock and sleep, injected into the limiter so that it runs on a fake clock in tests.
#pragma once

#include <cstdint>

namespace vgpu::compute {

class Clock {
 public:
  virtual ~Clock() = default;
  // CLOCK_MONOTONIC nanoseconds (the clock the shared state's times are on).
  virtual int64_t NowNs() = 0;
};

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Blocks the calling thread for about `ns` (never spins). ns <= 0 returns at once.
  virtual void SleepNs(int64_t ns) = 0;
};

// Process-wide, never destroyed (usable from atexit handlers and late-exiting threads).
Clock* SystemClock();      // clock_gettime(CLOCK_MONOTONIC) (vDSO: no syscall)
Sleeper* SystemSleeper();  // nanosleep, resumed after EINTR until the time has passed

}  // namespace vgpu::compute
