// When a standalone vGPU is gone.
//
// In standalone mode the kubelet's Allocate names no pod, so a standalone grant cannot be tied
// to a pod's cgroup (the way vgpu-node notices that hami and volcano containers are gone). What
// does identify it are the device IDs the kubelet handed out: the grant's directory is named
// after the device IDs of its first Allocate (StandaloneKey), and the kubelet's pod resources API
// (podresources v1 List) says which container holds which device IDs. A grant whose IDs no
// container holds any more is gone; the daemon is then told (ContainerDirectory::Release) and
// removes the directory.
//
// Pieces, from pure to effectful:
//   StandaloneKey       the pod uid of a grant, from its resource and device IDs;
//   HeldStandaloneKeys  the keys the containers of one List hold;
//   StandaloneLifetime  which grants have been absent from every List for `grace` (a grant just
//                       allocated may not be listed yet; a kubelet that just restarted may list
//                       no pods for a moment: a List without any pod is no evidence);
//   StandaloneReaper    a thread that lists every `interval` and releases what Lifetime says.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "k8s/status.h"

namespace vgpu::k8s {

inline constexpr char kStandaloneKeyPrefix[] = "standalone-";

// "standalone-" + 16 hex digits of a hash of the resource name and the sorted device IDs. The
// kubelet never hands one device ID to two live containers, so live grants never share a key.
std::string StandaloneKey(const std::string& resource, std::vector<std::string> device_ids);

// One container's devices of one resource, as the pod resources API lists them.
struct HeldDevices {
  std::string resource;
  std::vector<std::string> device_ids;
};

// The result of one List: every container's devices, and how many pods the kubelet listed (all
// pods, also those holding no devices).
struct PodResourcesSnapshot {
  int pods = 0;
  std::vector<HeldDevices> held;
};

// The StandaloneKey of every (container, resource) in `held` whose resource is one of `resources`.
std::set<std::string> HeldStandaloneKeys(const std::vector<HeldDevices>& held, const std::set<std::string>& resources);

class StandaloneLifetime {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StandaloneLifetime(std::chrono::milliseconds grace) : grace_(grace) {}

  // One List. `grants` are the pod uids of the standalone grants not yet released; `snapshot`
  // the List. Returns the grants absent from every List with pods since at least `grace` ago.
  // A List with no pod at all changes nothing. Thread safety: none (one caller).
  std::vector<std::string> Observe(const std::vector<std::string>& grants, const PodResourcesSnapshot& snapshot,
                                   const std::set<std::string>& resources, Clock::time_point now);

 private:
  const std::chrono::milliseconds grace_;
  std::map<std::string, Clock::time_point> absent_since_;
};

struct StandaloneReaperOptions {
  std::set<std::string> resources;  // the standalone memory and compute resource names
  std::chrono::milliseconds interval{5000};
  std::chrono::milliseconds grace{30000};
  // One List of the kubelet's pod resources (PodResourcesClient::List in vgpu-node).
  std::function<Status(PodResourcesSnapshot*)> list;
  // Pod uids of the standalone grants not yet released (the daemon's container records).
  std::function<std::vector<std::string>()> grants;
  // Tells the daemon the grant is gone (ContainerDirectory::Release of "<uid>_vgpu").
  std::function<Status(const std::string& pod_uid)> release;
};

class StandaloneReaper {
 public:
  explicit StandaloneReaper(StandaloneReaperOptions options);
  ~StandaloneReaper();  // Stop()

  void Start();
  // Returns once the thread has ended (promptly: it waits on a condition variable).
  void Stop();
  // One round, as the thread runs it (tests call it directly).
  void RunOnce(StandaloneLifetime::Clock::time_point now);
  int released() const;

 private:
  const StandaloneReaperOptions options_;
  StandaloneLifetime lifetime_;  // used by the thread (or RunOnce) only
  std::string last_error_;       // used by the thread only: an error is logged when it changes
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;   // guarded by mu_
  int released_ = 0;    // guarded by mu_
  std::thread thread_;
};

}  // namespace vgpu::k8s
