#include "k8s/inventory.h"

namespace vgpu::k8s {

Inventory::Inventory(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}

void Inventory::Set(std::vector<GpuInfo> gpus) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gpus == gpus_) return;
    gpus_ = std::move(gpus);
    ++version_;
  }
  changed_.notify_all();
}

std::vector<GpuInfo> Inventory::Get(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version != nullptr) *version = version_;
  return gpus_;
}

uint64_t Inventory::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

uint64_t Inventory::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return version_ != seen || shut_down_; });
  return version_;
}

void Inventory::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
  }
  changed_.notify_all();
}

bool Inventory::shut_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shut_down_;
}

}  // namespace vgpu::k8s
