#include "k8s/kubelet_registrar.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "k8s/deviceplugin.grpc.pb.h"

namespace vgpu::k8s {
namespace {

// Identity of the kubelet.sock in place (0 = none).
ino_t KubeletSocketInode(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) return 0;
  return info.st_ino;
}

}  // namespace

KubeletRegistrar::KubeletRegistrar(KubeletRegistrarOptions options, std::vector<PluginEndpoint*> endpoints)
    : options_(std::move(options)), endpoints_(std::move(endpoints)) {}

KubeletRegistrar::~KubeletRegistrar() { Stop(); }

Status KubeletRegistrar::Start() {
  for (PluginEndpoint* endpoint : endpoints_) {
    if (Status status = endpoint->Start(); !status.ok) {
      for (PluginEndpoint* started : endpoints_) started->Stop();
      return status;
    }
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void KubeletRegistrar::Stop() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
  for (PluginEndpoint* endpoint : endpoints_) endpoint->Stop();
}

Status KubeletRegistrar::Register(PluginEndpoint* endpoint) {
  const std::string kubelet = options_.directory + "/" + kKubeletSocketName;
  auto channel = grpc::CreateChannel("unix://" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version(kDevicePluginVersion);
  const std::string& path = endpoint->socket_path();
  request.set_endpoint(path.substr(path.rfind('/') + 1));
  request.set_resource_name(endpoint->plugin()->resource_name());
  *request.mutable_options() = endpoint->plugin()->Options();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options_.register_timeout);
  v1beta1::Empty reply;
  grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    return Status::Error("Register " + endpoint->plugin()->resource_name() + " with " + kubelet + ": " +
                         status.error_message());
  }
  return Status::Ok();
}

void KubeletRegistrar::Loop() {
  const std::string kubelet = options_.directory + "/" + kKubeletSocketName;
  int watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch_fd >= 0 &&
      inotify_add_watch(watch_fd, options_.directory.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    VGPU_WARN("cannot watch %s (%s); checking every %lld ms instead", options_.directory.c_str(), strerror(errno),
              static_cast<long long>(options_.poll.count()));
    close(watch_fd);
    watch_fd = -1;
  }
  std::map<PluginEndpoint*, ino_t> registered_with;  // endpoint -> kubelet.sock inode it registered with
  std::map<PluginEndpoint*, std::chrono::steady_clock::time_point> retry_at;
  while (!stop_) {
    const ino_t kubelet_inode = KubeletSocketInode(kubelet);
    const auto now = std::chrono::steady_clock::now();
    for (PluginEndpoint* endpoint : endpoints_) {
      if (!endpoint->SocketIntact()) {
        VGPU_INFO("socket %s is gone; serving again", endpoint->socket_path().c_str());
        if (Status status = endpoint->Start(); !status.ok) {
          VGPU_ERROR("%s", status.message.c_str());
          continue;
        }
        registered_with.erase(endpoint);
      }
      if (kubelet_inode == 0 || registered_with[endpoint] == kubelet_inode) continue;
      if (now < retry_at[endpoint]) continue;
      if (Status status = Register(endpoint); status.ok) {
        registered_with[endpoint] = kubelet_inode;
        ++registrations_;
        VGPU_INFO("registered %s with the kubelet", endpoint->plugin()->resource_name().c_str());
      } else {
        retry_at[endpoint] = now + options_.retry;
        VGPU_WARN("%s", status.message.c_str());
      }
    }
    // Sleep until the directory changes, Stop(), or the poll interval passes.
    struct pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {watch_fd, POLLIN, 0}};
    const int count = watch_fd >= 0 ? 2 : 1;
    if (poll(fds, count, static_cast<int>(options_.poll.count())) > 0 && count == 2 && (fds[1].revents & POLLIN)) {
      char buffer[4096];
      while (read(watch_fd, buffer, sizeof(buffer)) > 0) {
      }
    }
  }
  if (watch_fd >= 0) close(watch_fd);
}

}  // namespace vgpu::k8s
