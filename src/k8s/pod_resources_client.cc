#include "k8s/pod_resources_client.h"

#include <grpcpp/grpcpp.h>

#include "k8s/podresources.grpc.pb.h"

namespace vgpu::k8s {

struct PodResourcesClient::Channel {
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout), channel_(std::make_unique<Channel>()) {
  // The channel reconnects by itself when the kubelet restarts and recreates the socket.
  channel_->stub = v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials()));
}

PodResourcesClient::~PodResourcesClient() = default;

Status PodResourcesClient::List(PodResourcesSnapshot* snapshot) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse reply;
  grpc::Status status = channel_->stub->List(&context, request, &reply);
  if (!status.ok()) {
    return Status::Error("List on " + socket_path_ + ": " + status.error_message() + " (gRPC code " +
                         std::to_string(static_cast<int>(status.error_code())) + ")");
  }
  snapshot->pods = reply.pod_resources_size();
  snapshot->held.clear();
  for (const v1::PodResources& pod : reply.pod_resources()) {
    for (const v1::ContainerResources& container : pod.containers()) {
      for (const v1::ContainerDevices& devices : container.devices()) {
        HeldDevices held;
        held.resource = devices.resource_name();
        held.device_ids.assign(devices.device_ids().begin(), devices.device_ids().end());
        snapshot->held.push_back(std::move(held));
      }
    }
  }
  return Status::Ok();
}

}  // namespace vgpu::k8s
