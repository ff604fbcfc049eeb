// FakeKubeApi: an in-memory Kubernetes API for unit tests of the allocators and the reporter.
//
// It stores objects by path ("/api/v1/nodes/n", "/api/v1/namespaces/ns/pods/p") with the
// semantics the plugin relies on: every write bumps a global resourceVersion and stamps it on the
// object; a merge patch (RFC 7386) carrying metadata.resourceVersion is refused with 409 unless
// the object still has that version; GET /api/v1/pods?fieldSelector=spec.nodeName=<n> lists
// pods; watches on nodes deliver MODIFIED events. Failures are injected per call. A request
// whose RBAC access is not in kApiAccess (api_access.h) is answered 403, as the deployed
// ClusterRole would.
// Thread safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "k8s/kube_api.h"

namespace vgpu::k8s {

// RFC 7386 JSON merge patch.
Json ApplyMergePatch(Json target, const Json& patch);

class FakeKubeApi : public KubeApi {
 public:
  // Stores (creates or replaces) an object; returns its new resourceVersion.
  std::string Put(const std::string& path, Json object);
  void Remove(const std::string& path);
  std::optional<Json> Object(const std::string& path) const;
  std::string Annotation(const std::string& path, const std::string& key) const;  // "" when absent
  bool HasAnnotation(const std::string& path, const std::string& key) const;

  // The next `count` calls whose method and path start with the given prefixes fail with
  // `http_status` (0 = no answer). method: "GET", "PATCH", "WATCH" or "" for any.
  void FailNext(const std::string& method, const std::string& path_prefix, int count, int http_status);
  // Runs before every PATCH is applied (after the failure check); tests use it to race writes.
  void SetBeforePatch(std::function<void(const std::string& path)> hook);

  int calls(const std::string& method) const;
  std::vector<std::string> log() const;  // "GET /api/v1/..." per call

  ApiResponse Get(const std::string& path) override;
  ApiResponse MergePatch(const std::string& path, const Json& patch) override;
  ApiResponse Watch(const std::string& path, const std::function<bool(const Json& event)>& on_event,
                    const std::atomic<bool>* stop) override;

 private:
  struct Failure {
    std::string method;
    std::string prefix;
    int count;
    int status;
  };
  std::optional<ApiResponse> Injected(const std::string& method, const std::string& path);  // REQUIRES: mu_
  std::string Stamp(Json* object);                                                       // REQUIRES: mu_

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Json> objects_;
  uint64_t version_ = 100;
  std::vector<Failure> failures_;
  std::map<std::string, int> calls_;
  std::vector<std::string> log_;
  std::deque<std::pair<uint64_t, std::string>> modified_;  // (version, path) of every write
  std::function<void(const std::string&)> before_patch_;
};

}  // namespace vgpu::k8s
