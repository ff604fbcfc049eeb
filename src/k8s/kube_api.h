// The slice of the Kubernetes API that vgpu-node uses: GET (objects and lists with field
// selectors), watch, and JSON merge patches guarded by resourceVersion.
//
// KubeApi is an interface so that the allocation logic is tested against an in-memory fake
// (tests/k8s/fake_kube_api.h); HttpKubeApi (kube_client.h) is the HTTPS implementation.
// Paths are API paths with query, e.g. "/api/v1/namespaces/default/pods/p".
//
// Error model: ApiResponse.http_status is 0 when no HTTP answer arrived (connection refused,
// TLS failure, timeout); otherwise the HTTP status. `error` says what went wrong in one line
// (the transport error, or the message of the API's Status object).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "k8s/json_util.h"
#include "k8s/status.h"

namespace vgpu::k8s {

struct ApiResponse {
  int http_status = 0;
  std::string error;  // empty on success
  Json body;          // the decoded JSON body (null when there was none)

  bool ok() const { return http_status >= 200 && http_status < 300; }
  bool conflict() const { return http_status == 409; }
  bool not_found() const { return http_status == 404; }
  // "HTTP 409: <message>" or "no answer: <error>".
  std::string Describe() const;
};

class KubeApi {
 public:
  virtual ~KubeApi() = default;
  virtual ApiResponse Get(const std::string& path) = 0;
  // Content-Type application/merge-patch+json (RFC 7386). A patch that carries
  // metadata.resourceVersion is refused with 409 unless the object still has that version.
  virtual ApiResponse MergePatch(const std::string& path, const Json& patch) = 0;
  // Opens a watch (the path must carry watch=1) and calls on_event for each event object
  // ({"type":..., "object":...}) until on_event returns false, *stop becomes true, or the server
  // ends the stream. Returns the final status (ok when the server ended the stream normally).
  virtual ApiResponse Watch(const std::string& path, const std::function<bool(const Json& event)>& on_event,
                            const std::atomic<bool>* stop) = 0;
  // For a daemon that stops: every request in flight ends soon after (unanswered, or a watch's
  // normal end), and every later one fails at once. Final.
  virtual void CancelAll() {}
};

// Paths. Names are used verbatim (Kubernetes names are DNS labels/subdomains; anything else is
// percent-encoded).
std::string NodePath(const std::string& node);
std::string PodPath(const std::string& pod_namespace, const std::string& pod);
// All pods (every namespace) with spec.nodeName == node.
std::string PodsOnNodePath(const std::string& node);
// A watch on the one node, from resource_version ("" = now), ending after timeout_seconds.
std::string NodeWatchPath(const std::string& node, const std::string& resource_version, int timeout_seconds);
std::string UrlEncode(const std::string& text);

// Read-modify-write guarded by resourceVersion: GETs `path`, asks make_patch for a merge patch
// (without metadata.resourceVersion; it is added here), PATCHes, and on 409 starts again, at
// most `attempts` times. make_patch returns nullopt when nothing needs to change (then no PATCH
// is sent) and sets *error to refuse (then the update fails with that message).
// *updated (optional) receives the object after the patch (or as read, when nothing changed).
// `known` (optional) is a copy of the object the caller read a moment ago: the first attempt
// uses it instead of a GET (a stale copy only costs one 409 and a re-read).
using MakePatch = std::function<std::optional<Json>(const Json& object, std::string* error)>;
Status GuardedUpdate(KubeApi& api, const std::string& path, const MakePatch& make_patch, int attempts,
                     Json* updated = nullptr, const Json* known = nullptr);

// {"metadata":{"annotations":{key: value or null}}} for each entry (nullopt = remove).
Json AnnotationPatch(const std::map<std::string, std::optional<std::string>>& annotations);

}  // namespace vgpu::k8s
