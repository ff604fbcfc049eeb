#include "node/mode_module.h"

#include <map>
#include <mutex>

namespace vgpu::node {
namespace {

struct Entry {
  std::string summary;
  ModeFactory factory;
};

// Function-local statics: registration runs from other files' static initializers.
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, Entry>& Modes() {
  static std::map<std::string, Entry> modes;
  return modes;
}

}  // namespace

bool RegisterMode(const std::string& name, const std::string& summary, ModeFactory factory) {
  std::lock_guard<std::mutex> lock(Mu());
  Modes().emplace(name, Entry{summary, std::move(factory)});
  return true;
}

std::unique_ptr<ModeModule> CreateMode(const std::string& name) {
  std::lock_guard<std::mutex> lock(Mu());
  const auto it = Modes().find(name);
  return it == Modes().end() ? nullptr : it->second.factory();
}

std::vector<std::pair<std::string, std::string>> ListModes() {
  std::lock_guard<std::mutex> lock(Mu());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, e] : Modes()) out.emplace_back(name, e.summary);
  return out;
}

}  // namespace vgpu::node
