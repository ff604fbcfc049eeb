#include "k8s/virtual_devices.h"

#include <algorithm>
#include <map>
#include <set>

namespace vgpu::k8s {
namespace {

char Separator(UnitIdStyle style) { return style == UnitIdStyle::kUuidUnderscore ? '_' : '-'; }

bool AllDigits(const std::string& text) {
  return !text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string UnitId(UnitIdStyle style, const GpuInfo& gpu, int n) {
  const std::string prefix = style == UnitIdStyle::kIndexDash ? std::to_string(gpu.index) : gpu.uuid;
  return prefix + Separator(style) + std::to_string(n);
}

const GpuInfo* GpuOfUnit(UnitIdStyle style, const std::string& id, const std::vector<GpuInfo>& gpus) {
  size_t at = id.rfind(Separator(style));
  if (at == std::string::npos || at == 0 || !AllDigits(id.substr(at + 1))) return nullptr;
  const std::string prefix = id.substr(0, at);
  for (const GpuInfo& gpu : gpus) {
    if (style == UnitIdStyle::kIndexDash ? prefix == std::to_string(gpu.index) : prefix == gpu.uuid) return &gpu;
  }
  return nullptr;
}

std::vector<std::string> PreferredUnits(UnitIdStyle style, Placement placement, const std::vector<GpuInfo>& gpus,
                                        const std::vector<std::string>& available,
                                        const std::vector<std::string>& must_include, int size,
                                        const std::string& preferred_gpu) {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  for (const std::string& id : must_include) {
    if (static_cast<int>(chosen.size()) >= size) break;
    if (taken.insert(id).second) chosen.push_back(id);
  }
  // Free units per GPU uuid ("" = unknown GPU), each list in the kubelet's order.
  std::map<std::string, std::vector<std::string>> free;
  for (const std::string& id : available) {
    if (taken.count(id) != 0) continue;
    const GpuInfo* gpu = GpuOfUnit(style, id, gpus);
    free[gpu == nullptr ? "" : gpu->uuid].push_back(id);
  }
  auto take = [&](std::vector<std::string>& units, size_t n) {
    for (size_t i = 0; i < n && i < units.size() && static_cast<int>(chosen.size()) < size; ++i) {
      chosen.push_back(units[i]);
    }
    units.erase(units.begin(), units.begin() + std::min(n, units.size()));
  };
  // GPU order: by free units (descending for spreading, ascending for packing), then uuid.
  std::vector<std::string> order;
  for (const auto& [uuid, units] : free) {
    if (!uuid.empty()) order.push_back(uuid);
  }
  auto by_free = [&](bool descending) {
    std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
      return descending ? free[a].size() > free[b].size() : free[a].size() < free[b].size();
    });
  };

  if (placement == Placement::kSameGpu) {
    const int missing = size - static_cast<int>(chosen.size());
    std::string target;
    if (!chosen.empty()) {
      if (const GpuInfo* gpu = GpuOfUnit(style, chosen.front(), gpus)) target = gpu->uuid;
    } else if (!preferred_gpu.empty() && static_cast<int>(free[preferred_gpu].size()) >= missing) {
      target = preferred_gpu;
    } else {
      by_free(/*descending=*/false);
      for (const std::string& uuid : order) {
        if (static_cast<int>(free[uuid].size()) >= missing) {
          target = uuid;
          break;
        }
      }
    }
    if (!target.empty()) take(free[target], free[target].size());
    // Not enough on one GPU: fill from the GPUs with the most free units.
    by_free(/*descending=*/true);
    for (const std::string& uuid : order) take(free[uuid], free[uuid].size());
  } else {
    by_free(/*descending=*/true);
    while (static_cast<int>(chosen.size()) < size) {
      bool any = false;
      for (const std::string& uuid : order) {
        if (!free[uuid].empty() && static_cast<int>(chosen.size()) < size) {
          take(free[uuid], 1);
          any = true;
        }
      }
      if (!any) break;
    }
  }
  take(free[""], free[""].size());
  return chosen;
}

}  // namespace vgpu::k8s
