// TEST DOUBLE ONLY: process-wide simulator core (see sim_core.h).
#include "sim_core.h"

#include <cstdio>
#include <mutex>

namespace vgpusim {

const Core& GetCore() {
  static Core* core = [] {
    auto* c = new Core;  // never destroyed: used until the process ends
    c->config = ReadConfig();
    if (!c->config.error.empty()) {
      c->error = c->config.error;
    } else {
      c->state = SharedState::Open(c->config, &c->error);
    }
    if (!c->error.empty()) std::fprintf(stderr, "vgpu-sim: %s\n", c->error.c_str());
    return c;
  }();
  return *core;
}

std::string DeviceUuidString(int physical_index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-5151a000-0000-4000-8000-%012x", physical_index);
  return buf;
}

void DeviceUuidBytes(int physical_index, unsigned char out[16]) {
  const unsigned char prefix[10] = {0x51, 0x51, 0xa0, 0x00, 0x00, 0x00, 0x40, 0x00, 0x80, 0x00};
  for (int i = 0; i < 10; ++i) out[i] = prefix[i];
  const uint64_t tail = static_cast<uint64_t>(physical_index);
  for (int i = 0; i < 6; ++i) out[10 + i] = static_cast<unsigned char>(tail >> (8 * (5 - i)));
}

unsigned DevicePciBus(int physical_index) { return 0x18u + 0x10u * static_cast<unsigned>(physical_index); }

std::string DevicePciBusId(int physical_index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "00000000:%02X:00.0", DevicePciBus(physical_index));
  return buf;
}

}  // namespace vgpusim
