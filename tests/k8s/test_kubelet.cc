#include "test_kubelet.h"

#include <dirent.h>
#include <unistd.h>

namespace vgpu::k8s::testing {

class TestKubelet::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(TestKubelet* owner) : owner_(owner) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request, v1beta1::Empty*) override {
    if (request->version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + request->version());
    }
    {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      owner_->registered_[request->resource_name()].push_back(*request);
    }
    owner_->changed_.notify_all();
    return grpc::Status::OK;
  }

 private:
  TestKubelet* const owner_;
};

struct TestKubelet::Watcher {
  std::unique_ptr<grpc::ClientContext> context;
  std::thread thread;
  v1beta1::ListAndWatchResponse latest;  // guarded by the kubelet's mu_
  int updates = 0;                        // guarded by the kubelet's mu_
};

TestKubelet::TestKubelet(std::string dir) : dir_(std::move(dir)) {}

TestKubelet::~TestKubelet() { Stop(); }

bool TestKubelet::Start() {
  service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + dir_ + "/kubelet.sock", grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  return server_ != nullptr;
}

void TestKubelet::StopWatchers() {
  std::map<std::string, std::unique_ptr<Watcher>> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers.swap(watchers_);
  }
  for (auto& [resource, watcher] : watchers) {
    watcher->context->TryCancel();
    if (watcher->thread.joinable()) watcher->thread.join();
  }
}

void TestKubelet::Stop() {
  StopWatchers();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stubs_.clear();  // a restarted kubelet connects anew
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
}

bool TestKubelet::Restart() {
  Stop();
  if (DIR* dir = opendir(dir_.c_str())) {
    while (struct dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0) unlink((dir_ + "/" + name).c_str());
    }
    closedir(dir);
  }
  return Start();
}

std::optional<v1beta1::RegisterRequest> TestKubelet::WaitForRegistration(const std::string& resource, int count,
                                                                         std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, timeout, [&] { return static_cast<int>(registered_[resource].size()) >= count; })) {
    return std::nullopt;
  }
  return registered_[resource].back();
}

int TestKubelet::registrations(const std::string& resource) {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(registered_[resource].size());
}

std::shared_ptr<v1beta1::DevicePlugin::Stub> TestKubelet::Plugin(const std::string& resource) {
  std::lock_guard<std::mutex> lock(mu_);
  if (registered_[resource].empty()) return nullptr;
  const std::string endpoint = registered_[resource].back().endpoint();
  std::shared_ptr<v1beta1::DevicePlugin::Stub>& stub = stubs_[endpoint];
  if (!stub) {
    stub = v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix://" + dir_ + "/" + endpoint, grpc::InsecureChannelCredentials()));
  }
  return stub;
}

v1beta1::ListAndWatchResponse TestKubelet::WatchDevices(
    const std::string& resource, const std::function<bool(const v1beta1::ListAndWatchResponse&)>& ready,
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (watchers_.count(resource) == 0) {
    auto watcher = std::make_unique<Watcher>();
    watcher->context = std::make_unique<grpc::ClientContext>();
    Watcher* raw = watcher.get();
    lock.unlock();
    std::shared_ptr<v1beta1::DevicePlugin::Stub> stub = Plugin(resource);
    lock.lock();
    if (watchers_.count(resource) != 0) return watchers_[resource]->latest;  // raced with another caller
    watcher->thread = std::thread([this, raw, stub] {
      if (!stub) return;
      v1beta1::Empty empty;
      auto reader = stub->ListAndWatch(raw->context.get(), empty);
      v1beta1::ListAndWatchResponse list;
      while (reader->Read(&list)) {
        {
          std::lock_guard<std::mutex> guard(mu_);
          raw->latest = list;
          ++raw->updates;
        }
        changed_.notify_all();
      }
      reader->Finish();
    });
    watchers_[resource] = std::move(watcher);
  }
  Watcher* watcher = watchers_[resource].get();
  changed_.wait_for(lock, timeout, [&] { return watcher->updates > 0 && ready(watcher->latest); });
  return watcher->latest;
}

int TestKubelet::device_updates(const std::string& resource) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watchers_.find(resource);
  return it == watchers_.end() ? 0 : it->second->updates;
}

grpc::Status TestKubelet::Allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                                   v1beta1::AllocateResponse* response) {
  auto stub = Plugin(resource);
  if (!stub) return grpc::Status(grpc::StatusCode::UNAVAILABLE, resource + " is not registered");
  v1beta1::AllocateRequest request;
  for (const auto& ids : containers) {
    auto* container = request.add_container_requests();
    for (const auto& id : ids) container->add_devices_ids(id);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return stub->Allocate(&context, request, response);
}

grpc::Status TestKubelet::Preferred(const std::string& resource, const std::vector<std::string>& available, int size,
                                    std::vector<std::string>* chosen, const std::vector<std::string>& must_include) {
  auto stub = Plugin(resource);
  if (!stub) return grpc::Status(grpc::StatusCode::UNAVAILABLE, resource + " is not registered");
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : available) container->add_available_deviceids(id);
  for (const auto& id : must_include) container->add_must_include_deviceids(id);
  container->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status status = stub->GetPreferredAllocation(&context, request, &response);
  chosen->clear();
  if (status.ok() && response.container_responses_size() == 1) {
    for (const auto& id : response.container_responses(0).deviceids()) chosen->push_back(id);
  }
  return status;
}

}  // namespace vgpu::k8s::testing
