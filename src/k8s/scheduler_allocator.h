// SchedulerAllocator: Allocate for the modes where a scheduler decided (HAMi, Volcano).
//
// The kubelet's Allocate carries only virtual device IDs; which physical GPUs and how much of
// them a container gets was decided by the scheduler and written into the pod. So, per call:
//   1. find the pod being allocated:
//        HAMi     the pod named by the node lock hami.io/mutex.lock (nothing else: without a
//                 lock naming a pod, Allocate fails; it never guesses);
//        Volcano  the one pod on this node with volcano.sh/bind-phase=allocating and
//                 volcano.sh/vgpu-node=<node> (the hamivgpu lock names no pod); none or more
//                 than one is an error;
//   2. check the pod: assigned to this node, bind-phase "allocating";
//   3. per container request: decode <devices-to-allocate>, take the first entry that still
//      holds NVIDIA devices, check it (as many devices as the kubelet asks for, every GPU on this
//      node and healthy, memory > 0), and pop it: the shortened annotation is written with a
//      merge patch guarded by resourceVersion (a 409 re-reads the pod and starts over), so two
//      calls never pop the same entry;
//   4. write the container's ledger (ContainerStore) and answer with the grant
//      (container_grant.h);
//   5. when no NVIDIA device is left in the pod: bind-phase=success, release the node lock.
// Any failure fails the Allocate with a message that names the pod, annotation or node, and —
// once the pod is known — sets bind-phase=failed and releases the node lock. The lock is only
// released while it still holds the value read in step 1 (a lock the scheduler has taken since
// for another pod is left alone).
//
// Thread safety: Allocate calls are serialised (one at a time), as the kubelet makes them.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "k8s/container_grant.h"
#include "k8s/container_store.h"
#include "k8s/deviceplugin.pb.h"
#include "k8s/gpu_inventory.h"
#include "k8s/kube_api.h"
#include "k8s/scheduler_protocol.h"

namespace vgpu::k8s {

struct SchedulerAllocatorOptions {
  const SchedulerProtocol* protocol = &kHamiProtocol;
  std::string node_name;
  NodePaths paths;
  int memory_factor = 1;     // MiB per memory unit in the pod annotation (Volcano's factor; 1 for HAMi)
  int update_attempts = 5;   // guarded updates: attempts before giving up on 409s
};

class SchedulerAllocator {
 public:
  // `api` and `store` must outlive the allocator.
  SchedulerAllocator(SchedulerAllocatorOptions options, KubeApi* api, ContainerStore* store);

  Status Allocate(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                  v1beta1::AllocateResponse* response);

 private:
  struct Target;  // the pod being allocated and the lock value seen
  Status FindTarget(Target* target);
  // Volcano: the one allocating pod on this node (its lock names none).
  Status FindAllocatingPod(Target* target);
  Status AllocateContainer(const std::vector<GpuInfo>& gpus, const Target& target,
                           const v1beta1::ContainerAllocateRequest& request, Json* pod,
                           v1beta1::ContainerAllocateResponse* response);
  // Appends what happened to the pod and the lock to `failure` and returns it.
  Status Fail(const Target& target, bool mark_pod_failed, Status failure);
  Status ReleaseLock(const Target& target);
  Status SetBindPhase(const Target& target, const char* phase);

  const SchedulerAllocatorOptions options_;
  KubeApi* const api_;
  ContainerStore* const store_;
  std::mutex mu_;  // serialises Allocate
};

}  // namespace vgpu::k8s
