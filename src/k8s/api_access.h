// Every Kubernetes API access vgpu-node makes, as RBAC authorizes it (verb on resource), and the
// mapping from a request (method + path, kube_api.h) to that pair.
//
// The table is the single list that both sides check against:
//   - FakeKubeApi (fake_kube_api.h) answers 403 Forbidden to any request whose access is not in
//     the table, as an API server with exactly the deployed ClusterRole would; so a new call in
//     the allocators or the reporter fails the unit tests until it is added here;
//   - tests/deploy/check_manifests.py reads kApiAccess from this file and requires the rendered
//     ClusterRole of every deploy/kustomize overlay to grant exactly these verbs.
// Keep one `{"verb", "resource"},` entry per line (the deploy test parses them).
#pragma once

#include <string>
#include <string_view>

namespace vgpu::k8s {

struct ApiAccess {
  const char* verb;      // RBAC verb: get, list, watch, patch, ...
  const char* resource;  // core-group resource ("" API group), e.g. nodes, pods
};

// Used in hami and volcano mode; standalone mode makes no API request.
inline constexpr ApiAccess kApiAccess[] = {
    // NodeReporter: node annotations (register, handshake), watch for handshake requests;
    // allocators: read the node lock, release it.
    {"get", "nodes"},
    {"watch", "nodes"},
    {"patch", "nodes"},
    // Allocators: read the pod named by the lock (hami), list the node's pods (volcano), pop the
    // devices annotation and set bind-phase.
    {"get", "pods"},
    {"list", "pods"},
    {"patch", "pods"},
};

// The access a request needs (verb, resource as RBAC names them).
struct RequestAccess {
  std::string verb;
  std::string resource;
};

// `method` is "GET", "PATCH" or "WATCH" (KubeApi::Watch); `path` an API path with query, e.g.
// "/api/v1/pods?fieldSelector=...". A GET of a collection is "list", with watch=1 / watch=true in
// the query "watch". Subresources are "pods/status". A path outside the core group /api/v1/
// yields resource "" (never in the table).
inline RequestAccess AccessOf(std::string_view method, std::string_view path) {
  const size_t query_at = path.find('?');
  const std::string_view query = query_at == std::string_view::npos ? std::string_view() : path.substr(query_at + 1);
  path = path.substr(0, query_at);
  constexpr std::string_view kCore = "/api/v1/";
  if (path.substr(0, kCore.size()) != kCore) return {std::string(method), ""};
  path.remove_prefix(kCore.size());
  // namespaces/<ns>/<resource>[/<name>[/<subresource>]] or <resource>[/<name>[/<subresource>]]
  constexpr std::string_view kNamespaces = "namespaces/";
  if (path.substr(0, kNamespaces.size()) == kNamespaces) {
    const size_t slash = path.find('/', kNamespaces.size());
    if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  }
  const size_t name_at = path.find('/');
  RequestAccess access;
  access.resource = std::string(path.substr(0, name_at));
  const bool named = name_at != std::string_view::npos;
  if (named) {
    const size_t sub_at = path.find('/', name_at + 1);
    if (sub_at != std::string_view::npos) access.resource += "/" + std::string(path.substr(sub_at + 1));
  }
  const bool watch_query = query.find("watch=1") != std::string_view::npos ||
                           query.find("watch=true") != std::string_view::npos;
  if (method == "WATCH" || (method == "GET" && watch_query)) access.verb = "watch";
  else if (method == "GET") access.verb = named ? "get" : "list";
  else if (method == "PATCH") access.verb = "patch";
  else if (method == "PUT") access.verb = "update";
  else if (method == "POST") access.verb = "create";
  else if (method == "DELETE") access.verb = named ? "delete" : "deletecollection";
  else access.verb = std::string(method);
  return access;
}

inline bool AccessAllowed(const RequestAccess& access) {
  for (const ApiAccess& allowed : kApiAccess) {
    if (access.verb == allowed.verb && access.resource == allowed.resource) return true;
  }
  return false;
}

}  // namespace vgpu::k8s
