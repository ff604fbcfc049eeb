#include "node/gpu_source.h"

#include <dlfcn.h>
#include <errno.h>
#include <time.h>

#include <mutex>

#include "node/nvml_api.h"

namespace vgpu::node {
namespace {

struct NvmlFns {
  vgpuNvmlReturn (*init)();
  vgpuNvmlReturn (*shutdown)();
  const char* (*error_string)(vgpuNvmlReturn);
  vgpuNvmlReturn (*driver_version)(char*, unsigned);
  vgpuNvmlReturn (*count)(unsigned*);
  vgpuNvmlReturn (*handle_by_index)(unsigned, vgpuNvmlDevice*);
  vgpuNvmlReturn (*uuid)(vgpuNvmlDevice, char*, unsigned);
  vgpuNvmlReturn (*name)(vgpuNvmlDevice, char*, unsigned);
  vgpuNvmlReturn (*memory)(vgpuNvmlDevice, VgpuNvmlMemory*);
  vgpuNvmlReturn (*utilization)(vgpuNvmlDevice, VgpuNvmlUtilization*);
  vgpuNvmlReturn (*processes)(vgpuNvmlDevice, unsigned*, VgpuNvmlProcessInfo*);  // _v3, else _v2
  vgpuNvmlReturn (*event_set_create)(vgpuNvmlEventSet*);
  vgpuNvmlReturn (*register_events)(vgpuNvmlDevice, unsigned long long, vgpuNvmlEventSet);
  vgpuNvmlReturn (*supported_events)(vgpuNvmlDevice, unsigned long long*);
  vgpuNvmlReturn (*event_wait)(vgpuNvmlEventSet, VgpuNvmlEventData*, unsigned);  // _v2, else v1
  vgpuNvmlReturn (*event_set_free)(vgpuNvmlEventSet);
};

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

void SleepMs(int ms) {
  struct timespec ts = {ms / 1000, static_cast<long>(ms % 1000) * 1'000'000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

template <typename T>
void Load(void* lib, T* fn, const char* name, const char* fallback = nullptr) {
  void* p = dlsym(lib, name);
  if (p == nullptr && fallback != nullptr) p = dlsym(lib, fallback);
  *fn = reinterpret_cast<T>(p);
}

class NvmlSource : public GpuSource {
 public:
  NvmlSource(void* lib, NvmlFns fns, std::string library) : lib_(lib), f_(fns), library_(std::move(library)) {}

  ~NvmlSource() override {
    if (events_ != nullptr && f_.event_set_free != nullptr) f_.event_set_free(events_);
    if (f_.shutdown != nullptr) f_.shutdown();
    // The library stays loaded: NVML may have threads of its own.
    (void)lib_;
  }

  std::string Init() {
    if (f_.init == nullptr || f_.count == nullptr || f_.handle_by_index == nullptr) {
      return library_ + ": missing nvmlInit_v2 / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2";
    }
    const vgpuNvmlReturn rc = f_.init();
    if (rc != kNvmlSuccess) return library_ + ": nvmlInit failed: " + Err(rc);
    unsigned count = 0;
    if (const vgpuNvmlReturn c = f_.count(&count); c != kNvmlSuccess) return "nvmlDeviceGetCount failed: " + Err(c);
    for (unsigned i = 0; i < count; ++i) {
      vgpuNvmlDevice d = nullptr;
      if (f_.handle_by_index(i, &d) != kNvmlSuccess) d = nullptr;
      devices_.push_back(d);
    }
    if (f_.driver_version != nullptr) {
      char v[96] = {};
      if (f_.driver_version(v, sizeof(v)) == kNvmlSuccess) driver_ = v;
    }
    // Health events: XID and ECC where supported.
    if (f_.event_set_create != nullptr && f_.register_events != nullptr && f_.event_wait != nullptr &&
        f_.event_set_create(&events_) == kNvmlSuccess) {
      for (vgpuNvmlDevice d : devices_) {
        if (d == nullptr) continue;
        unsigned long long mask = kNvmlEventXidCritical | kNvmlEventDoubleBitEcc | kNvmlEventSingleBitEcc;
        unsigned long long supported = mask;
        if (f_.supported_events != nullptr && f_.supported_events(d, &supported) == kNvmlSuccess) mask &= supported;
        if (mask != 0) f_.register_events(d, mask, events_);
      }
    }
    return "";
  }

  std::vector<GpuSample> Sample() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GpuSample> out;
    for (size_t i = 0; i < devices_.size(); ++i) {
      GpuSample s;
      s.index = static_cast<uint32_t>(i);
      vgpuNvmlDevice d = devices_[i];
      if (d == nullptr) {
        s.ok = false;
        s.error = "no handle";
        out.push_back(std::move(s));
        continue;
      }
      char text[96] = {};
      if (f_.uuid != nullptr && f_.uuid(d, text, sizeof(text)) == kNvmlSuccess) s.uuid = text;
      text[0] = '\0';
      if (f_.name != nullptr && f_.name(d, text, sizeof(text)) == kNvmlSuccess) s.name = text;
      VgpuNvmlMemory m{};
      if (f_.memory != nullptr) {
        if (const vgpuNvmlReturn rc = f_.memory(d, &m); rc == kNvmlSuccess) {
          s.memory_total = m.total;
          s.memory_used = m.used;
        } else {
          s.ok = false;
          s.error = "memory info: " + Err(rc);
        }
      }
      VgpuNvmlUtilization u{};
      if (f_.utilization != nullptr && f_.utilization(d, &u) == kNvmlSuccess) s.utilization = u.gpu;
      if (f_.processes != nullptr) {
        unsigned count = 64;
        std::vector<VgpuNvmlProcessInfo> infos(count);
        vgpuNvmlReturn rc = f_.processes(d, &count, infos.data());
        if (rc == kNvmlErrorInsufficientSize && count <= 4096) {
          infos.resize(count + 16);
          count = static_cast<unsigned>(infos.size());
          rc = f_.processes(d, &count, infos.data());
        }
        if (rc == kNvmlSuccess) {
          for (unsigned k = 0; k < count && k < infos.size(); ++k) s.processes.push_back({infos[k].pid, infos[k].usedGpuMemory});
        } else if (s.ok) {
          s.ok = false;
          s.error = "running processes: " + Err(rc);
        }
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  bool WaitEvent(int timeout_ms, GpuEvent* event) override {
    if (events_ == nullptr) {
      SleepMs(timeout_ms);  // nothing to wait on: behave like a wait that timed out
      return false;
    }
    VgpuNvmlEventData data{};
    const int64_t start = NowMs();
    const vgpuNvmlReturn rc = f_.event_wait(events_, &data, static_cast<unsigned>(timeout_ms));
    if (rc != kNvmlSuccess) {
      if (rc == kNvmlErrorGpuIsLost) {
        event->kind = GpuEvent::Kind::kLost;
        event->index = IndexOf(data.device);
        return true;
      }
      // Never spin on an error that returns at once.
      const int64_t left = timeout_ms - (NowMs() - start);
      if (left > 0) SleepMs(static_cast<int>(left));
      return false;
    }
    event->index = IndexOf(data.device);
    event->data = data.eventData;
    if (data.eventType & kNvmlEventXidCritical) event->kind = GpuEvent::Kind::kXid;
    else if (data.eventType & kNvmlEventDoubleBitEcc) event->kind = GpuEvent::Kind::kEccDoubleBit;
    else if (data.eventType & kNvmlEventSingleBitEcc) event->kind = GpuEvent::Kind::kEccSingleBit;
    else return false;
    return true;
  }

  bool Probe(uint32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (index >= devices_.size() || devices_[index] == nullptr || f_.memory == nullptr) return false;
    VgpuNvmlMemory m{};
    char uuid[96] = {};
    return f_.memory(devices_[index], &m) == kNvmlSuccess &&
           (f_.uuid == nullptr || f_.uuid(devices_[index], uuid, sizeof(uuid)) == kNvmlSuccess);
  }

  std::string Describe() const override {
    return library_ + (driver_.empty() ? "" : " (driver " + driver_ + ")") + ", " + std::to_string(devices_.size()) +
           " GPU(s), health events " + (events_ != nullptr ? "on" : "unavailable");
  }

 private:
  std::string Err(vgpuNvmlReturn rc) const {
    const char* s = f_.error_string != nullptr ? f_.error_string(rc) : nullptr;
    return std::string(s != nullptr ? s : "error") + " (" + std::to_string(rc) + ")";
  }
  uint32_t IndexOf(vgpuNvmlDevice d) const {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i] == d) return static_cast<uint32_t>(i);
    }
    return 0;
  }

  void* lib_;
  const NvmlFns f_;
  const std::string library_;
  std::string driver_;
  std::vector<vgpuNvmlDevice> devices_;  // constant after Init
  vgpuNvmlEventSet events_ = nullptr;    // constant after Init
  std::mutex mu_;                        // serialises queries
};

}  // namespace

std::unique_ptr<GpuSource> OpenNvmlSource(const std::string& library, std::string* error) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    *error = "cannot load " + library + ": " + (why != nullptr ? why : "unknown error");
    return nullptr;
  }
  NvmlFns f{};
  Load(lib, &f.init, "nvmlInit_v2", "nvmlInit");
  Load(lib, &f.shutdown, "nvmlShutdown");
  Load(lib, &f.error_string, "nvmlErrorString");
  Load(lib, &f.driver_version, "nvmlSystemGetDriverVersion");
  Load(lib, &f.count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  Load(lib, &f.handle_by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  Load(lib, &f.uuid, "nvmlDeviceGetUUID");
  Load(lib, &f.name, "nvmlDeviceGetName");
  Load(lib, &f.memory, "nvmlDeviceGetMemoryInfo");
  Load(lib, &f.utilization, "nvmlDeviceGetUtilizationRates");
  Load(lib, &f.processes, "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2");
  Load(lib, &f.event_set_create, "nvmlEventSetCreate");
  Load(lib, &f.register_events, "nvmlDeviceRegisterEvents");
  Load(lib, &f.supported_events, "nvmlDeviceGetSupportedEventTypes");
  Load(lib, &f.event_wait, "nvmlEventSetWait_v2", "nvmlEventSetWait");
  Load(lib, &f.event_set_free, "nvmlEventSetFree");
  auto source = std::make_unique<NvmlSource>(lib, f, library);
  if (std::string problem = source->Init(); !problem.empty()) {
    *error = problem;
    return nullptr;
  }
  return source;
}

}  // namespace vgpu::node
