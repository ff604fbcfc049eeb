#include "k8s/device_plugin_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "k8s/deviceplugin.grpc.pb.h"

namespace vgpu::k8s {

class PluginEndpoint::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(ResourcePlugin* plugin, Inventory* inventory) : plugin_(plugin), inventory_(inventory) {}

  void BeginStop() { stopping_ = true; }
  int allocate_calls() const { return allocate_calls_.load(); }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    *options = plugin_->Options();
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    try {
      uint64_t sent = 0;
      std::vector<GpuInfo> gpus = inventory_->Get(&sent);
      if (!SendList(gpus, writer)) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, ListTooLarge(gpus));
      while (!stopping_ && !context->IsCancelled() && !inventory_->shut_down()) {
        uint64_t now = inventory_->WaitForChange(sent, std::chrono::milliseconds(200));
        if (now == sent || stopping_) continue;
        gpus = inventory_->Get(&sent);
        if (!SendList(gpus, writer)) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, ListTooLarge(gpus));
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string("ListAndWatch: ") + e.what());
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    try {
      const std::vector<GpuInfo> gpus = inventory_->Get();
      for (const auto& container : request->container_requests()) {
        Status status = plugin_->PreferredAllocation(gpus, container, response->add_container_responses());
        if (!status.ok) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, status.message);
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string("GetPreferredAllocation: ") + e.what());
    }
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    ++allocate_calls_;
    try {
      Status status = plugin_->Allocate(inventory_->Get(), *request, response);
      if (!status.ok) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, plugin_->resource_name() + ": " + status.message);
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      VGPU_ERROR("Allocate (%s): unexpected exception: %s", plugin_->resource_name().c_str(), e.what());
      return grpc::Status(grpc::StatusCode::INTERNAL, plugin_->resource_name() + ": Allocate failed: " + e.what());
    }
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  bool SendList(const std::vector<GpuInfo>& gpus, grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
    v1beta1::ListAndWatchResponse list;
    plugin_->ListDevices(gpus, &list);
    if (list.ByteSizeLong() > kMaxListAndWatchBytes) return false;
    writer->Write(list);
    return true;
  }
  std::string ListTooLarge(const std::vector<GpuInfo>& gpus) { return CheckListAndWatchSize(*plugin_, gpus).message; }

  ResourcePlugin* const plugin_;
  Inventory* const inventory_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> allocate_calls_{0};
};

PluginEndpoint::PluginEndpoint(ResourcePlugin* plugin, Inventory* inventory, std::string directory)
    : plugin_(plugin), inventory_(inventory), socket_path_(directory + "/" + plugin->socket_name()) {}

PluginEndpoint::~PluginEndpoint() { Stop(); }

Status PluginEndpoint::Start() {
  Stop();
  if (unlink(socket_path_.c_str()) != 0 && errno != ENOENT) {
    return Status::Error("cannot remove the stale socket " + socket_path_ + ": " + strerror(errno));
  }
  service_ = std::make_unique<Service>(plugin_, inventory_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) return Status::Error("cannot serve gRPC on " + socket_path_);
  struct stat info {};
  if (stat(socket_path_.c_str(), &info) != 0) {
    Stop();
    return Status::Error("the socket " + socket_path_ + " did not appear: " + strerror(errno));
  }
  socket_dev_ = info.st_dev;
  socket_inode_ = info.st_ino;
  VGPU_INFO("serving %s on %s", plugin_->resource_name().c_str(), socket_path_.c_str());
  return Status::Ok();
}

void PluginEndpoint::Stop() {
  if (!server_) return;
  service_->BeginStop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
  if (SocketIntact()) unlink(socket_path_.c_str());
  socket_inode_ = 0;
}

bool PluginEndpoint::running() const { return server_ != nullptr; }

bool PluginEndpoint::SocketIntact() const {
  struct stat info {};
  return socket_inode_ != 0 && stat(socket_path_.c_str(), &info) == 0 && info.st_ino == socket_inode_ &&
         info.st_dev == socket_dev_;
}

int PluginEndpoint::allocate_calls() const { return service_ ? service_->allocate_calls() : 0; }

}  // namespace vgpu::k8s
