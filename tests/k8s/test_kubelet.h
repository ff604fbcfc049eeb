// TestKubelet: the kubelet's side of the device plugin API, for integration tests.
//
// It serves Registration on <dir>/kubelet.sock, records every RegisterRequest, and drives a
// registered plugin over the plugin's real socket (<dir>/<endpoint>): ListAndWatch in a
// background thread (the latest device list is kept), GetPreferredAllocation, Allocate.
// Restart() does what a restarting kubelet does: stop serving, delete every socket in <dir>,
// serve a new kubelet.sock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "k8s/deviceplugin.grpc.pb.h"

namespace vgpu::k8s::testing {

class TestKubelet {
 public:
  explicit TestKubelet(std::string dir);
  ~TestKubelet();

  bool Start();
  void Stop();
  // Stop, delete every *.sock in the directory (the plugins' too), Start.
  bool Restart();

  // Waits until `resource` has registered at least `count` times in total; returns the latest
  // request (or nullopt on timeout).
  std::optional<v1beta1::RegisterRequest> WaitForRegistration(const std::string& resource, int count,
                                                              std::chrono::milliseconds timeout);
  int registrations(const std::string& resource);

  // A stub for the plugin that registered `resource` (its latest endpoint). Like the kubelet,
  // one connection per endpoint is kept and reused.
  std::shared_ptr<v1beta1::DevicePlugin::Stub> Plugin(const std::string& resource);

  // ListAndWatch: starts a watcher thread for `resource` (idempotent) and waits until the
  // latest list satisfies `ready` (or timeout). Returns the latest list seen.
  v1beta1::ListAndWatchResponse WatchDevices(const std::string& resource,
                                             const std::function<bool(const v1beta1::ListAndWatchResponse&)>& ready,
                                             std::chrono::milliseconds timeout);
  int device_updates(const std::string& resource);

  grpc::Status Allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                        v1beta1::AllocateResponse* response);
  grpc::Status Preferred(const std::string& resource, const std::vector<std::string>& available, int size,
                         std::vector<std::string>* chosen, const std::vector<std::string>& must_include = {});

  const std::string& dir() const { return dir_; }

 private:
  class RegistrationService;
  struct Watcher;
  void StopWatchers();

  const std::string dir_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<v1beta1::RegisterRequest>> registered_;  // guarded by mu_
  std::map<std::string, std::unique_ptr<Watcher>> watchers_;                  // guarded by mu_
  std::map<std::string, std::shared_ptr<v1beta1::DevicePlugin::Stub>> stubs_;  // by endpoint; guarded by mu_
};

}  // namespace vgpu::k8s::testing
