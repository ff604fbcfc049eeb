#include "k8s/scheduler_allocator.h"

#include <set>

#include "common/config.h"
#include "common/log.h"

namespace vgpu::k8s {

struct SchedulerAllocator::Target {
  std::string lock_value;          // the node lock as read ("" = none)
  bool may_release_lock = false;   // the lock belongs to this allocation (or to no pod at all)
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_path;            // "" until the pod is known
  Json pod;                        // as last read or patched
  Json node;                       // as read at the start

  std::string PodName() const { return pod_namespace + "/" + pod_name; }
};

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// Container names in annotation order.
std::vector<const Json*> ContainersInEntryOrder(const Json& pod, bool init_first) {
  std::vector<const Json*> out;
  auto add = [&](std::string_view field) {
    const Json* list = JsonFind(pod, {"spec", field});
    if (list == nullptr || !list->is_array()) return;
    for (const Json& container : *list) out.push_back(&container);
  };
  if (init_first) add("initContainers");
  add("containers");
  return out;
}

// The container sets CUDA_DISABLE_CONTROL to a true value in its spec.
bool DisablesControl(const Json& container) {
  const Json* env = JsonFind(container, {"env"});
  if (env == nullptr || !env->is_array()) return false;
  for (const Json& variable : *env) {
    if (JsonString(variable, {"name"}) != "CUDA_DISABLE_CONTROL") continue;
    const Json* value = JsonFind(variable, {"value"});
    if (value == nullptr || !value->is_string()) return false;  // valueFrom: unknown; the library decides
    std::optional<bool> parsed = ParseBool(value->get<std::string>());
    return parsed.value_or(false);
  }
  return false;
}

bool IsPendingPhase(const Json& pod) {
  const std::string phase = JsonString(pod, {"status", "phase"});
  return phase.empty() || phase == "Pending";
}

}  // namespace

SchedulerAllocator::SchedulerAllocator(SchedulerAllocatorOptions options, KubeApi* api, ContainerStore* store)
    : options_(std::move(options)), api_(api), store_(store) {}

Status SchedulerAllocator::FindAllocatingPod(Target* target) {
  const SchedulerProtocol& protocol = *options_.protocol;
  const std::string& node = options_.node_name;
  ApiResponse list = api_->Get(PodsOnNodePath(node));
  if (!list.ok()) return Status::Error("cannot list the pods on node " + node + ": " + list.Describe());
  const Json* items = JsonFind(list.body, {"items"});
  std::vector<std::string> candidates;
  if (items != nullptr && items->is_array()) {
    for (const Json& pod : *items) {
      const std::map<std::string, std::string> annotations = Annotations(pod);
      const std::string* phase = FindAnnotation(annotations, protocol.bind_phase);
      const std::string* assigned = FindAnnotation(annotations, protocol.assigned_node);
      if (phase == nullptr || *phase != kBindPhaseAllocating || assigned == nullptr || *assigned != node ||
          !IsPendingPhase(pod)) {
        continue;
      }
      candidates.push_back(JsonString(pod, {"metadata", "namespace"}) + "/" + JsonString(pod, {"metadata", "name"}));
      if (candidates.size() == 1) {
        target->pod_namespace = JsonString(pod, {"metadata", "namespace"});
        target->pod_name = JsonString(pod, {"metadata", "name"});
        target->pod = pod;
      }
    }
  }
  if (candidates.empty()) {
    return Status::Error(std::string("no pod on node ") + node + " has " + protocol.bind_phase + "=allocating and " +
                         protocol.assigned_node + "=" + node);
  }
  if (candidates.size() > 1) {
    std::string names;
    for (const std::string& name : candidates) names += (names.empty() ? "" : ", ") + name;
    return Status::Error(std::to_string(candidates.size()) + " pods on node " + node + " are allocating at once (" +
                         names + "); refusing to guess which one this Allocate is for (enable Volcano's node lock)");
  }
  return Status::Ok();
}

Status SchedulerAllocator::FindTarget(Target* target) {
  const SchedulerProtocol& protocol = *options_.protocol;
  const std::string& node = options_.node_name;
  ApiResponse node_object = api_->Get(NodePath(node));
  if (!node_object.ok()) return Status::Error("cannot read node " + node + ": " + node_object.Describe());
  target->node = node_object.body;
  const std::map<std::string, std::string> node_annotations = Annotations(node_object.body);
  if (const std::string* lock = FindAnnotation(node_annotations, protocol.lock_annotation)) target->lock_value = *lock;

  if (protocol.lock_names_pod) {
    if (target->lock_value.empty()) {
      return Status::Error("node " + node + " has no " + protocol.lock_annotation +
                           " annotation naming the pod being scheduled; refusing to guess which pod this is");
    }
    NodeLockValue lock;
    if (Status status = ParseNodeLock(protocol, target->lock_value, &lock); !status.ok) return status;
    target->pod_namespace = lock.pod_namespace;
    target->pod_name = lock.pod_name;
    target->may_release_lock = true;  // from here on the lock names the pod this call is about
  } else {
    target->may_release_lock = !target->lock_value.empty();
    if (Status status = FindAllocatingPod(target); !status.ok) return status;
  }

  const std::string path = PodPath(target->pod_namespace, target->pod_name);
  ApiResponse pod;
  if (target->pod.is_object()) {  // Volcano: as listed a moment ago
    pod.http_status = 200;
    pod.body = std::move(target->pod);
  } else {
    pod = api_->Get(path);
    if (!pod.ok()) return Status::Error("cannot read pod " + target->PodName() + ": " + pod.Describe());
  }
  const std::map<std::string, std::string> annotations = Annotations(pod.body);
  const std::string* assigned = FindAnnotation(annotations, protocol.assigned_node);
  if (assigned == nullptr || *assigned != node) {
    return Status::Error("pod " + target->PodName() + " is assigned to node \"" + (assigned ? *assigned : "") +
                         "\" (" + protocol.assigned_node + "), not to " + node);
  }
  const std::string spec_node = JsonString(pod.body, {"spec", "nodeName"});
  if (!spec_node.empty() && spec_node != node) {
    return Status::Error("pod " + target->PodName() + " is bound to node " + spec_node + ", not to " + node);
  }
  const std::string* phase = FindAnnotation(annotations, protocol.bind_phase);
  if (phase == nullptr || *phase != kBindPhaseAllocating) {
    return Status::Error("pod " + target->PodName() + " has " + protocol.bind_phase + "=\"" + (phase ? *phase : "") +
                         "\", not \"allocating\"");
  }
  target->pod_path = path;
  target->pod = std::move(pod.body);
  return Status::Ok();
}

Status SchedulerAllocator::AllocateContainer(const std::vector<GpuInfo>& gpus, const Target& target,
                                             const v1beta1::ContainerAllocateRequest& request, Json* pod,
                                             v1beta1::ContainerAllocateResponse* response) {
  const SchedulerProtocol& protocol = *options_.protocol;
  ContainerDevices granted;
  std::string container_name;
  bool skip_preload = false;
  MakePatch pop = [&](const Json& object, std::string* error) -> std::optional<Json> {
    const std::map<std::string, std::string> annotations = Annotations(object);
    const std::string* text = FindAnnotation(annotations, protocol.devices_to_allocate);
    const std::string what = "pod " + target.PodName() + " annotation " + protocol.devices_to_allocate;
    if (text == nullptr) {
      *error = "pod " + target.PodName() + " has no " + protocol.devices_to_allocate + " annotation";
      return std::nullopt;
    }
    std::vector<ContainerDevices> entries;
    if (Status status = DecodePodDevices(*text, protocol.separator, &entries); !status.ok) {
      *error = what + "=\"" + *text + "\" is malformed: " + status.message;
      return std::nullopt;
    }
    const int index = NextEntryWithType(entries, kNvidiaDeviceType);
    if (index < 0) {
      *error = what + " holds no " + kNvidiaDeviceType + " device left to allocate";
      return std::nullopt;
    }
    const std::vector<const Json*> containers = ContainersInEntryOrder(object, protocol.init_containers_first);
    if (entries.size() > containers.size()) {
      *error = what + " lists " + std::to_string(entries.size()) + " containers but the pod has " +
               std::to_string(containers.size());
      return std::nullopt;
    }
    granted.clear();
    ContainerDevices rest;
    for (const ContainerDevice& device : entries[index]) {
      (device.type == kNvidiaDeviceType ? granted : rest).push_back(device);
    }
    if (static_cast<int>(granted.size()) != request.devices_ids_size()) {
      *error = what + " grants container entry " + std::to_string(index) + " " + std::to_string(granted.size()) +
               " GPU(s), but the kubelet allocates " + std::to_string(request.devices_ids_size());
      return std::nullopt;
    }
    std::set<std::string> seen;
    for (const ContainerDevice& device : granted) {
      const GpuInfo* gpu = FindGpu(gpus, device.uuid);
      if (gpu == nullptr) {
        *error = what + " names GPU " + device.uuid + ", which is not on node " + options_.node_name;
        return std::nullopt;
      }
      if (!gpu->healthy) {
        *error = what + " names GPU " + device.uuid + ", which is unhealthy";
        return std::nullopt;
      }
      if (!seen.insert(device.uuid).second) {
        *error = what + " names GPU " + device.uuid + " twice for one container";
        return std::nullopt;
      }
      if (device.memory <= 0) {
        *error = what + " grants 0 memory on GPU " + device.uuid + " (that would mean no limit)";
        return std::nullopt;
      }
    }
    container_name = JsonString(*containers[index], {"name"});
    skip_preload = DisablesControl(*containers[index]);
    entries[index] = std::move(rest);
    return AnnotationPatch({{protocol.devices_to_allocate, EncodePodDevices(entries, protocol.separator)}});
  };
  const Json known = *pod;
  if (Status status = GuardedUpdate(*api_, target.pod_path, pop, options_.update_attempts, pod, &known); !status.ok) {
    return status;
  }

  ContainerGrant grant;
  grant.pod_uid = JsonString(*pod, {"metadata", "uid"});
  grant.container_name = container_name;
  grant.key = ContainerKey(grant.pod_uid, container_name);
  grant.skip_preload = skip_preload;
  for (const ContainerDevice& device : granted) {
    grant.gpus.push_back({device.uuid, static_cast<uint64_t>(device.memory) * options_.memory_factor * kMiB, device.cores});
  }
  if (Status status = ValidateContainerKey(grant.key); !status.ok) {
    return status.Context("pod " + target.PodName() + " uid \"" + grant.pod_uid + "\", container \"" + container_name + "\"");
  }
  ledger::LimitSet limits;
  if (Status status = GrantLimits(grant, &limits); !status.ok) return status.Context("pod " + target.PodName());
  grant.pod_namespace = target.pod_namespace;
  grant.pod_name = target.pod_name;
  if (Status status = store_->Prepare(grant, limits); !status.ok) {
    return status.Context("cannot prepare the ledger of " + target.PodName() + "/" + container_name);
  }
  BuildContainerResponse(grant, options_.paths, response);
  return Status::Ok();
}

// bind-phase is one annotation set to a final value: a plain merge patch without resourceVersion.
// Guarding it (as the pop is, which must never happen twice) let a pod that kept changing under
// it (on a real API server, with a concurrent writer) use up every attempt: the containers had
// their GPUs and the pod stayed "allocating".
Status SchedulerAllocator::SetBindPhase(const Target& target, const char* phase) {
  const ApiResponse patched =
      api_->MergePatch(target.pod_path, AnnotationPatch({{options_.protocol->bind_phase, std::string(phase)}}));
  if (!patched.ok()) return Status::Error("PATCH " + target.pod_path + ": " + patched.Describe());
  return Status::Ok();
}

Status SchedulerAllocator::ReleaseLock(const Target& target) {
  if (!target.may_release_lock || target.lock_value.empty()) return Status::Ok();
  const char* key = options_.protocol->lock_annotation;
  return GuardedUpdate(*api_, NodePath(options_.node_name), [&](const Json& node, std::string*) -> std::optional<Json> {
    const std::map<std::string, std::string> annotations = Annotations(node);
    const std::string* now = FindAnnotation(annotations, key);
    if (now == nullptr || *now != target.lock_value) return std::nullopt;  // gone, or taken for another pod
    return AnnotationPatch({{key, std::nullopt}});
  }, options_.update_attempts, nullptr, &target.node);
}

Status SchedulerAllocator::Fail(const Target& target, bool mark_pod_failed, Status failure) {
  std::string notes;
  if (mark_pod_failed && !target.pod_path.empty()) {
    Status marked = SetBindPhase(target, kBindPhaseFailed);
    notes += marked.ok ? std::string("; ") + options_.protocol->bind_phase + " set to failed"
                       : "; could not set " + std::string(options_.protocol->bind_phase) + "=failed: " + marked.message;
  }
  if (target.may_release_lock && !target.lock_value.empty()) {
    Status released = ReleaseLock(target);
    notes += released.ok ? std::string("; node lock ") + options_.protocol->lock_annotation + " released"
                         : "; could not release the node lock: " + released.message;
  }
  Status result = Status::Error(failure.message + notes);
  VGPU_ERROR("Allocate failed (%s): %s", options_.protocol->name, result.message.c_str());
  return result;
}

Status SchedulerAllocator::Allocate(const std::vector<GpuInfo>& gpus, const v1beta1::AllocateRequest& request,
                                    v1beta1::AllocateResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  const SchedulerProtocol& protocol = *options_.protocol;
  Target target;
  if (Status status = FindTarget(&target); !status.ok) {
    // A pod that was found but is not ours to allocate is not marked; the lock is released only
    // when it names this pod (HAMi) or no pod at all (Volcano).
    return Fail(target, /*mark_pod_failed=*/false, status);
  }
  if (request.container_requests_size() == 0) {
    return Fail(target, true, Status::Error("Allocate for pod " + target.PodName() + " carries no container request"));
  }
  for (const v1beta1::ContainerAllocateRequest& container : request.container_requests()) {
    if (Status status = AllocateContainer(gpus, target, container, &target.pod, response->add_container_responses());
        !status.ok) {
      response->clear_container_responses();
      return Fail(target, /*mark_pod_failed=*/true, status);
    }
  }
  // All of the pod's GPUs handed out: the scheduler may move on.
  std::vector<ContainerDevices> rest;
  const std::map<std::string, std::string> annotations = Annotations(target.pod);
  const std::string* text = FindAnnotation(annotations, protocol.devices_to_allocate);
  if (text == nullptr || (DecodePodDevices(*text, protocol.separator, &rest).ok && !AnyDeviceOfType(rest, kNvidiaDeviceType))) {
    Status phase = SetBindPhase(target, kBindPhaseSuccess);
    Status released = ReleaseLock(target);
    if (!phase.ok || !released.ok) {
      // The containers have their GPUs; the scheduler will expire the lock. Say so loudly.
      VGPU_ERROR("pod %s allocated, but finishing the bind failed: %s %s", target.PodName().c_str(),
                 phase.message.c_str(), released.message.c_str());
    }
  }
  VGPU_INFO("Allocate (%s): pod %s, %d container(s)", protocol.name, target.PodName().c_str(),
            request.container_requests_size());
  return Status::Ok();
}

}  // namespace vgpu::k8s
