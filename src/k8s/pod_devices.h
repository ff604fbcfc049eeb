// The per-pod device list that HAMi's scheduler extender and Volcano's deviceshare plugin write
// into pod annotations (hami.io/vgpu-devices-to-allocate, volcano.sh/devices-to-allocate).
//
// Grammar (both schedulers):
//   pod        = container entries, one per container that the scheduler considered
//   container  = { device ":" }            (may be empty: a container without GPUs)
//   device     = UUID "," TYPE "," MEM "," CORES
// MEM is the device memory granted (MiB for HAMi; units of the node's memory factor for
// Volcano), CORES the compute share in percent (0 = no compute limit).
// The two dialects differ only in how container entries are separated:
//   HAMi    every entry is terminated by ';'   "A,NVIDIA,1000,30:;;B,NVIDIA,2000,50:;"
//           (init containers first, then regular containers)
//   Volcano entries are joined by ';'          "A,NVIDIA,1000,30:;B,NVIDIA,2000,50:"
//           (regular containers only)
// Entry i belongs to container i in that order, so empty entries matter and are kept.
//
// Decoding is strict: a device without exactly four fields, an empty UUID or type, a UUID with
// blanks or non-ASCII, a MEM or CORES that is not a decimal integer in range, CORES above 100 —
// each is an error naming the entry. Nothing here talks to the API server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k8s/status.h"

namespace vgpu::k8s {

struct ContainerDevice {
  std::string uuid;
  std::string type;     // "NVIDIA" for GPUs
  int64_t memory = 0;   // MiB (HAMi) or memory-factor units (Volcano)
  int cores = 0;        // percent, 0..100
  bool operator==(const ContainerDevice&) const = default;
};

using ContainerDevices = std::vector<ContainerDevice>;

enum class EntrySeparator {
  kTerminated,  // HAMi: "<entry>;" per container
  kJoined,      // Volcano: entries joined by ';'
};

// Decodes `text` into one ContainerDevices per container entry. An empty text is a pod with no
// entries. With kTerminated, a missing final ';' is accepted (it is unambiguous).
Status DecodePodDevices(const std::string& text, EntrySeparator separator,
                        std::vector<ContainerDevices>* out);

// The inverse of DecodePodDevices: Encode(Decode(x)) == x for every x the schedulers write.
std::string EncodePodDevices(const std::vector<ContainerDevices>& pod, EntrySeparator separator);

// Index of the first entry holding a device of `type`, or -1.
int NextEntryWithType(const std::vector<ContainerDevices>& pod, const std::string& type);

// Whether any entry still holds a device of `type`.
bool AnyDeviceOfType(const std::vector<ContainerDevices>& pod, const std::string& type);

}  // namespace vgpu::k8s
