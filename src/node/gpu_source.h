// What the daemon reads from the GPUs: memory, utilization, the processes that hold memory on
// each GPU (host pids), and health events (XID, ECC). GpuSource is the interface; NVML (loaded
// with dlopen, so a node without the driver still runs the daemon) is the production
// implementation; tests use fakes or the simulated NVML (tests/simdriver).
//
// Thread safety: implementations must allow Sample()/Probe() from several threads and
// WaitEvent() from one thread concurrently with them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vgpu::node {

struct GpuProcessSample {
  uint32_t pid = 0;   // host pid
  uint64_t used = 0;  // bytes (NVML per-process usage)
};

struct GpuSample {
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  uint32_t utilization = 0;  // percent, last sample period
  bool ok = true;            // false: the queries failed (error says which)
  std::string error;
  std::vector<GpuProcessSample> processes;
};

struct GpuEvent {
  enum class Kind { kXid, kEccSingleBit, kEccDoubleBit, kLost };
  uint32_t index = 0;
  Kind kind = Kind::kXid;
  uint64_t data = 0;  // the XID for kXid
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // Every GPU, in NVML index order.
  virtual std::vector<GpuSample> Sample() = 0;
  // Waits up to timeout_ms for a health event; true with *event filled.
  virtual bool WaitEvent(int timeout_ms, GpuEvent* event) = 0;
  // Whether the GPU still answers basic queries (used to decide recovery).
  virtual bool Probe(uint32_t index) = 0;
  // "libnvidia-ml.so.1 (driver 580.65.06)", for the log.
  virtual std::string Describe() const = 0;
};

// Loads NVML from `library` and initialises it. nullptr with *error when it cannot.
// Health events are registered for XID and ECC on every GPU that supports them; a GPU without
// event support is only probed.
std::unique_ptr<GpuSource> OpenNvmlSource(const std::string& library, std::string* error);

}  // namespace vgpu::node
