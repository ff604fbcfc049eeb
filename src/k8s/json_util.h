// Non-throwing accessors for nlohmann::json documents received from the Kubernetes API.
//
// API objects come from the network: any field may be missing or of the wrong type. These
// helpers return a default (or nullptr) instead of throwing, so the callers decide what a missing
// field means and report it by name.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vgpu::k8s {

using Json = nlohmann::json;

// The value at `path` (object keys), or nullptr when any step is missing or not an object.
const Json* JsonFind(const Json& root, std::initializer_list<std::string_view> path);

// The string at `path`, or `fallback` when missing or not a string.
std::string JsonString(const Json& root, std::initializer_list<std::string_view> path,
                       const std::string& fallback = "");

// metadata.annotations as a map; values that are not strings are skipped.
std::map<std::string, std::string> Annotations(const Json& object);

// The annotation value, or nullptr when absent.
const std::string* FindAnnotation(const std::map<std::string, std::string>& annotations,
                                  const std::string& key);

// Parses JSON text without throwing; returns a discarded value (is_discarded()) on error.
Json ParseJson(std::string_view text);

}  // namespace vgpu::k8s
