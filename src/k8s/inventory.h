// Inventory: the current GPU list, shared by the device plugin servers (ListAndWatch), the
// allocators and the node reporter, with a version number that changes whenever the list does
// (a GPU turns unhealthy, recovers, appears or disappears), and a way to wait for that.
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "k8s/gpu_inventory.h"

namespace vgpu::k8s {

class Inventory {
 public:
  explicit Inventory(std::vector<GpuInfo> gpus = {});

  // Replaces the list; bumps the version and wakes waiters only when it differs.
  void Set(std::vector<GpuInfo> gpus);
  std::vector<GpuInfo> Get(uint64_t* version = nullptr) const;
  uint64_t version() const;

  // Blocks until the version differs from `seen`, Shutdown() is called, or `timeout` passes.
  // Returns the current version.
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;

  // Wakes every waiter for good (used when the plugin stops).
  void Shutdown();
  bool shut_down() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<GpuInfo> gpus_;  // guarded by mu_
  uint64_t version_ = 1;       // guarded by mu_
  bool shut_down_ = false;     // guarded by mu_
};

}  // namespace vgpu::k8s
