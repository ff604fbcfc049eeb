#include "k8s/kube_api.h"

namespace vgpu::k8s {

std::string ApiResponse::Describe() const {
  if (http_status == 0) return "no answer from the API server: " + error;
  return "HTTP " + std::to_string(http_status) + (error.empty() ? "" : ": " + error);
}

std::string UrlEncode(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string NodePath(const std::string& node) { return "/api/v1/nodes/" + UrlEncode(node); }

std::string PodPath(const std::string& pod_namespace, const std::string& pod) {
  return "/api/v1/namespaces/" + UrlEncode(pod_namespace) + "/pods/" + UrlEncode(pod);
}

std::string PodsOnNodePath(const std::string& node) {
  return "/api/v1/pods?fieldSelector=" + UrlEncode("spec.nodeName=" + node);
}

std::string NodeWatchPath(const std::string& node, const std::string& resource_version, int timeout_seconds) {
  std::string path = "/api/v1/nodes?watch=1&fieldSelector=" + UrlEncode("metadata.name=" + node) +
                     "&timeoutSeconds=" + std::to_string(timeout_seconds) + "&allowWatchBookmarks=false";
  if (!resource_version.empty()) path += "&resourceVersion=" + UrlEncode(resource_version);
  return path;
}

Status GuardedUpdate(KubeApi& api, const std::string& path, const MakePatch& make_patch, int attempts,
                     Json* updated, const Json* known) {
  std::string last_conflict;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    ApiResponse current;
    if (attempt == 0 && known != nullptr && known->is_object()) {
      current.http_status = 200;
      current.body = *known;
    } else {
      current = api.Get(path);
      if (!current.ok()) return Status::Error("GET " + path + ": " + current.Describe());
    }
    const std::string version = JsonString(current.body, {"metadata", "resourceVersion"});
    if (version.empty()) return Status::Error("GET " + path + ": the object has no metadata.resourceVersion");
    std::string refusal;
    std::optional<Json> patch = make_patch(current.body, &refusal);
    if (!refusal.empty()) return Status::Error(refusal);
    if (!patch) {
      if (updated != nullptr) *updated = current.body;
      return Status::Ok();
    }
    (*patch)["metadata"]["resourceVersion"] = version;
    ApiResponse patched = api.MergePatch(path, *patch);
    if (patched.ok()) {
      if (updated != nullptr) *updated = patched.body;
      return Status::Ok();
    }
    if (!patched.conflict()) return Status::Error("PATCH " + path + ": " + patched.Describe());
    last_conflict = patched.Describe();
  }
  return Status::Error("PATCH " + path + ": still conflicting after " + std::to_string(attempts) +
                       " attempts (" + last_conflict + ")");
}

Json AnnotationPatch(const std::map<std::string, std::optional<std::string>>& annotations) {
  Json patch = Json::object();
  Json& out = patch["metadata"]["annotations"];
  out = Json::object();
  for (const auto& [key, value] : annotations) {
    if (value) {
      out[key] = *value;
    } else {
      out[key] = nullptr;
    }
  }
  return patch;
}

}  // namespace vgpu::k8s
