#include "k8s/standalone_allocator.h"

#include "common/log.h"
#include "k8s/standalone_lifetime.h"
#include "k8s/virtual_devices.h"

namespace vgpu::k8s {
namespace {

const char* KindName(StandaloneKind kind) { return kind == StandaloneKind::kMemory ? "memory" : "compute"; }

}  // namespace

int StandaloneUnits(StandaloneKind kind, const GpuInfo& gpu) {
  if (kind == StandaloneKind::kCompute) return 100;
  return static_cast<int>(gpu.memory_bytes / kStandaloneMemoryUnit);
}

StandaloneAllocator::StandaloneAllocator(StandaloneOptions options, ContainerStore* store)
    : options_(std::move(options)), store_(store) {
  if (!options_.new_key) {
    options_.new_key = [memory = options_.memory_resource, compute = options_.compute_resource](
                           StandaloneKind kind, const std::vector<std::string>& ids) {
      return StandaloneKey(kind == StandaloneKind::kMemory ? memory : compute, ids);
    };
  }
}

bool StandaloneAllocator::Joinable(StandaloneKind kind) const {
  return open_ && open_->kind != kind && options_.now() - open_->at <= options_.pairing_window;
}

std::string StandaloneAllocator::PreferredGpu(StandaloneKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  return Joinable(kind) ? open_->uuid : std::string();
}

Status StandaloneAllocator::Allocate(StandaloneKind kind, const std::vector<GpuInfo>& gpus,
                                     const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request.container_requests_size() == 0) return Status::Error("Allocate carries no container request");
  for (const v1beta1::ContainerAllocateRequest& container : request.container_requests()) {
    if (Status status = AllocateContainer(kind, gpus, container, response->add_container_responses()); !status.ok) {
      response->clear_container_responses();
      VGPU_ERROR("Allocate failed (standalone %s): %s", KindName(kind), status.message.c_str());
      return status;
    }
  }
  return Status::Ok();
}

Status StandaloneAllocator::AllocateContainer(StandaloneKind kind, const std::vector<GpuInfo>& gpus,
                                              const v1beta1::ContainerAllocateRequest& request,
                                              v1beta1::ContainerAllocateResponse* response) {
  const char* what = KindName(kind);
  // Only a call that directly follows may join the open half: take it out now, so that a failed
  // call also ends it.
  std::optional<Half> open = std::move(open_);
  open_.reset();
  if (request.devices_ids_size() == 0) return Status::Error(std::string("no ") + what + " units requested");
  const GpuInfo* gpu = nullptr;
  for (const std::string& id : request.devices_ids()) {
    const GpuInfo* of = GpuOfUnit(UnitIdStyle::kUuidUnderscore, id, gpus);
    if (of == nullptr) return Status::Error(std::string(what) + " unit \"" + id + "\" names no GPU on this node");
    if (gpu != nullptr && of != gpu) {
      return Status::Error(std::string("the ") + what + " units span GPUs " + gpu->uuid + " and " + of->uuid +
                           "; a vGPU is one GPU (request at most one GPU's worth)");
    }
    gpu = of;
  }
  if (!gpu->healthy) return Status::Error("GPU " + gpu->uuid + " is unhealthy");
  const int units = request.devices_ids_size();
  if (units > StandaloneUnits(kind, *gpu)) {
    return Status::Error(std::to_string(units) + " " + what + " units requested, GPU " + gpu->uuid + " has " +
                         std::to_string(StandaloneUnits(kind, *gpu)));
  }

  Half half{kind, gpu->uuid, units, "", options_.now()};
  std::optional<Half> partner;
  if (open && open->kind != kind && half.at - open->at <= options_.pairing_window) {
    if (open->uuid != gpu->uuid) {
      return Status::Error(std::string("this container's ") + what + " units are on GPU " + gpu->uuid + " but its " +
                           KindName(open->kind) + " units are on GPU " + open->uuid +
                           "; memory and compute of one vGPU must be on one GPU");
    }
    partner = open;
    half.key = open->key;
  } else {
    half.key = options_.new_key(kind, {request.devices_ids().begin(), request.devices_ids().end()});
  }

  ContainerGrant grant;
  grant.pod_uid = half.key;
  grant.container_name = kStandaloneContainerName;
  grant.key = ContainerKey(grant.pod_uid, grant.container_name);
  grant.register_with_daemon = false;  // see ContainerGrant: the pod is unknown
  GrantedGpu granted{gpu->uuid, 0, 0};
  for (const Half* part : {&half, partner ? &*partner : nullptr}) {
    if (part == nullptr) continue;
    if (part->kind == StandaloneKind::kMemory) granted.memory_bytes = static_cast<uint64_t>(part->units) * kStandaloneMemoryUnit;
    if (part->kind == StandaloneKind::kCompute) granted.sm_limit = part->units;
  }
  grant.gpus.push_back(granted);
  ledger::LimitSet limits;
  if (Status status = GrantLimits(grant, &limits); !status.ok) return status;
  if (Status status = store_->Prepare(grant, limits); !status.ok) {
    return status.Context("cannot prepare the ledger " + grant.key);
  }
  BuildContainerResponse(grant, options_.paths, response);
  if (!partner) open_ = half;
  return Status::Ok();
}

}  // namespace vgpu::k8s
