#include "k8s/json_util.h"

namespace vgpu::k8s {

const Json* JsonFind(const Json& root, std::initializer_list<std::string_view> path) {
  const Json* node = &root;
  for (std::string_view key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

std::string JsonString(const Json& root, std::initializer_list<std::string_view> path,
                       const std::string& fallback) {
  const Json* node = JsonFind(root, path);
  return node != nullptr && node->is_string() ? node->get<std::string>() : fallback;
}

std::map<std::string, std::string> Annotations(const Json& object) {
  std::map<std::string, std::string> out;
  const Json* annotations = JsonFind(object, {"metadata", "annotations"});
  if (annotations == nullptr || !annotations->is_object()) return out;
  for (auto it = annotations->begin(); it != annotations->end(); ++it) {
    if (it.value().is_string()) out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

const std::string* FindAnnotation(const std::map<std::string, std::string>& annotations,
                                  const std::string& key) {
  auto it = annotations.find(key);
  return it == annotations.end() ? nullptr : &it->second;
}

Json ParseJson(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace vgpu::k8s
