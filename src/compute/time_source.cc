#include "compute/time_source.h"

#include <errno.h>
#include <time.h>

#include <new>

namespace vgpu::compute {
namespace {

class MonotonicClock final : public Clock {
 public:
  int64_t NowNs() override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
};

class NanoSleeper final : public Sleeper {
 public:
  void SleepNs(int64_t ns) override {
    if (ns <= 0) return;
    int saved_errno = errno;  // the application's errno survives the hook
    timespec left{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    errno = saved_errno;
  }
};

// Never-destroyed singletons: constructed in static storage on first use, never destructed.
template <typename T>
T* Immortal() {
  alignas(T) static unsigned char storage[sizeof(T)];
  static T* instance = new (storage) T();
  return instance;
}

}  // namespace

Clock* SystemClock() { return Immortal<MonotonicClock>(); }
Sleeper* SystemSleeper() { return Immortal<NanoSleeper>(); }

}  // namespace vgpu::compute
