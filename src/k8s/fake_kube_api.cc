#include "k8s/fake_kube_api.h"

#include <chrono>

#include "k8s/api_access.h"

namespace vgpu::k8s {
namespace {

std::string QueryValue(const std::string& path, const std::string& name) {
  size_t query = path.find('?');
  if (query == std::string::npos) return "";
  size_t at = path.find(name + "=", query);
  if (at == std::string::npos) return "";
  at += name.size() + 1;
  size_t end = path.find('&', at);
  std::string raw = path.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::string decoded;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size()) {
      decoded += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      decoded += raw[i];
    }
  }
  return decoded;
}

ApiResponse StatusAnswer(int code, const std::string& message) {
  ApiResponse response;
  response.http_status = code;
  response.error = message;
  response.body = {{"kind", "Status"}, {"code", code}, {"message", message}};
  return response;
}

}  // namespace

Json ApplyMergePatch(Json target, const Json& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = Json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_null()) {
      target.erase(it.key());
    } else {
      target[it.key()] = ApplyMergePatch(target.contains(it.key()) ? target[it.key()] : Json(), it.value());
    }
  }
  return target;
}

std::string FakeKubeApi::Stamp(Json* object) {
  const std::string version = std::to_string(++version_);
  (*object)["metadata"]["resourceVersion"] = version;
  return version;
}

std::string FakeKubeApi::Put(const std::string& path, Json object) {
  std::string version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = Stamp(&object);
    objects_[path] = std::move(object);
    modified_.emplace_back(version_, path);
  }
  changed_.notify_all();
  return version;
}

void FakeKubeApi::Remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_.erase(path);
}

std::optional<Json> FakeKubeApi::Object(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::string FakeKubeApi::Annotation(const std::string& path, const std::string& key) const {
  std::optional<Json> object = Object(path);
  if (!object) return "";
  auto annotations = Annotations(*object);
  auto it = annotations.find(key);
  return it == annotations.end() ? "" : it->second;
}

bool FakeKubeApi::HasAnnotation(const std::string& path, const std::string& key) const {
  std::optional<Json> object = Object(path);
  return object && Annotations(*object).count(key) != 0;
}

void FakeKubeApi::FailNext(const std::string& method, const std::string& path_prefix, int count, int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.push_back({method, path_prefix, count, http_status});
}

void FakeKubeApi::SetBeforePatch(std::function<void(const std::string& path)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  before_patch_ = std::move(hook);
}

int FakeKubeApi::calls(const std::string& method) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

std::vector<std::string> FakeKubeApi::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::optional<ApiResponse> FakeKubeApi::Injected(const std::string& method, const std::string& path) {
  ++calls_[method];
  log_.push_back(method + " " + path);
  // RBAC as deployed (api_access.h, deploy/kustomize): an access outside the table is refused.
  if (const RequestAccess access = AccessOf(method, path); !AccessAllowed(access)) {
    return StatusAnswer(403, "forbidden: " + access.verb + " on \"" + access.resource +
                                 "\" is not in kApiAccess (src/k8s/api_access.h)");
  }
  for (Failure& failure : failures_) {
    if (failure.count > 0 && (failure.method.empty() || failure.method == method) && path.rfind(failure.prefix, 0) == 0) {
      --failure.count;
      if (failure.status == 0) return ApiResponse{0, "connection refused (injected)", nullptr};
      return StatusAnswer(failure.status, "injected failure");
    }
  }
  return std::nullopt;
}

ApiResponse FakeKubeApi::Get(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto failure = Injected("GET", path)) return *failure;
  if (path.rfind("/api/v1/pods", 0) == 0) {
    const std::string selector = QueryValue(path, "fieldSelector");
    const std::string prefix = "spec.nodeName=";
    const std::string node = selector.rfind(prefix, 0) == 0 ? selector.substr(prefix.size()) : "";
    Json items = Json::array();
    for (const auto& [object_path, object] : objects_) {
      if (object_path.find("/pods/") == std::string::npos) continue;
      if (!selector.empty() && JsonString(object, {"spec", "nodeName"}) != node) continue;
      items.push_back(object);
    }
    return {200, "", Json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", std::to_string(version_)}}}, {"items", items}}};
  }
  auto it = objects_.find(path);
  if (it == objects_.end()) return StatusAnswer(404, path + " not found");
  return {200, "", it->second};
}

ApiResponse FakeKubeApi::MergePatch(const std::string& path, const Json& patch) {
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto failure = Injected("PATCH", path)) return *failure;
    hook = before_patch_;
  }
  if (hook) hook(path);
  ApiResponse answer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(path);
    if (it == objects_.end()) return StatusAnswer(404, path + " not found");
    Json body = patch;
    const Json* wanted = JsonFind(body, {"metadata", "resourceVersion"});
    if (wanted != nullptr) {
      if (JsonString(it->second, {"metadata", "resourceVersion"}) != wanted->get<std::string>()) {
        return StatusAnswer(409, "the object has been modified; please apply your changes to the latest version");
      }
      body["metadata"].erase("resourceVersion");
    }
    it->second = ApplyMergePatch(it->second, body);
    Stamp(&it->second);
    modified_.emplace_back(version_, path);
    answer = {200, "", it->second};
  }
  changed_.notify_all();
  return answer;
}

ApiResponse FakeKubeApi::Watch(const std::string& path, const std::function<bool(const Json& event)>& on_event,
                               const std::atomic<bool>* stop) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto failure = Injected("WATCH", path)) return *failure;
  const std::string selector = QueryValue(path, "fieldSelector");
  const std::string name = selector.rfind("metadata.name=", 0) == 0 ? selector.substr(14) : "";
  const std::string watched = "/api/v1/nodes/" + name;
  const std::string from = QueryValue(path, "resourceVersion");
  uint64_t seen = from.empty() ? version_ : std::stoull(from);
  const int timeout_seconds = QueryValue(path, "timeoutSeconds").empty() ? 300 : std::stoi(QueryValue(path, "timeoutSeconds"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (!(stop != nullptr && stop->load()) && std::chrono::steady_clock::now() < deadline) {
    bool delivered = false;
    for (const auto& [version, object_path] : modified_) {
      if (version <= seen || object_path != watched) continue;
      seen = version;
      auto it = objects_.find(object_path);
      if (it == objects_.end()) continue;
      Json event = {{"type", "MODIFIED"}, {"object", it->second}};
      lock.unlock();
      const bool more = on_event(event);
      lock.lock();
      if (!more) return {200, "", nullptr};
      delivered = true;
      break;  // modified_ may have changed while unlocked; rescan
    }
    if (!delivered) changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return {200, "", nullptr};
}

}  // namespace vgpu::k8s
