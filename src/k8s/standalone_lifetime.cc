#include "k8s/standalone_lifetime.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"

namespace vgpu::k8s {

std::string StandaloneKey(const std::string& resource, std::vector<std::string> device_ids) {
  std::sort(device_ids.begin(), device_ids.end());
  // FNV-1a, 64 bits: stable across builds and hosts (the key must survive a daemon restart).
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](const std::string& text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 0x100000001b3ull;
    }
    hash ^= 0xff;  // separator: no byte of a resource name or device ID
    hash *= 0x100000001b3ull;
  };
  mix(resource);
  for (const std::string& id : device_ids) mix(id);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return std::string(kStandaloneKeyPrefix) + hex;
}

std::set<std::string> HeldStandaloneKeys(const std::vector<HeldDevices>& held, const std::set<std::string>& resources) {
  std::set<std::string> keys;
  for (const HeldDevices& h : held) {
    if (!h.device_ids.empty() && resources.count(h.resource) != 0) keys.insert(StandaloneKey(h.resource, h.device_ids));
  }
  return keys;
}

std::vector<std::string> StandaloneLifetime::Observe(const std::vector<std::string>& grants,
                                                     const PodResourcesSnapshot& snapshot,
                                                     const std::set<std::string>& resources, Clock::time_point now) {
  std::vector<std::string> gone;
  if (snapshot.pods == 0) return gone;  // a kubelet that lists no pod at all has not synced yet
  const std::set<std::string> held = HeldStandaloneKeys(snapshot.held, resources);
  std::map<std::string, Clock::time_point> absent;
  for (const std::string& grant : grants) {
    if (held.count(grant) != 0) continue;
    auto it = absent_since_.find(grant);
    const Clock::time_point since = it == absent_since_.end() ? now : it->second;
    if (now - since >= grace_) {
      gone.push_back(grant);
    } else {
      absent[grant] = since;
    }
  }
  absent_since_ = std::move(absent);  // grants held again, or released, start over
  return gone;
}

StandaloneReaper::StandaloneReaper(StandaloneReaperOptions options)
    : options_(std::move(options)), lifetime_(options_.grace) {}

StandaloneReaper::~StandaloneReaper() { Stop(); }

void StandaloneReaper::Start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      RunOnce(StandaloneLifetime::Clock::now());
      lock.lock();
      wake_.wait_for(lock, options_.interval, [this] { return stop_; });
    }
  });
}

void StandaloneReaper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int StandaloneReaper::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

void StandaloneReaper::RunOnce(StandaloneLifetime::Clock::time_point now) {
  PodResourcesSnapshot snapshot;
  if (Status status = options_.list(&snapshot); !status.ok) {
    // Logged when it changes, not every interval; nothing is released without a List.
    if (status.message != last_error_) {
      VGPU_WARN("standalone: cannot list the kubelet's pod resources (%s); no standalone vGPU is released "
                "until it answers",
                status.message.c_str());
    }
    last_error_ = status.message;
    return;
  }
  if (!last_error_.empty()) VGPU_INFO("standalone: the kubelet's pod resources answer again");
  last_error_.clear();
  for (const std::string& uid : lifetime_.Observe(options_.grants(), snapshot, options_.resources, now)) {
    if (Status status = options_.release(uid); !status.ok) {
      VGPU_ERROR("standalone: cannot release %s: %s", uid.c_str(), status.message.c_str());
      continue;
    }
    VGPU_INFO("standalone: %s is held by no container any more (kubelet pod resources); released", uid.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++released_;
  }
}

}  // namespace vgpu::k8s
