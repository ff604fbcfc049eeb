// The ledger's view of a parsed configuration (common/config.h).
//
// One conversion, used by everyone who states limits from the environment (the library when it
// creates or checks a ledger, `vgpu run` when it writes its own), so that the same variables
// always yield the same LimitSet and CompareLimits reports only real disagreements.
#pragma once

#include "common/config.h"
#include "ledger/ledger.h"

namespace vgpu::ledger {

// Defaults from the all-device values; one DeviceLimit per ordinal that has a per-device value
// or a GPU_DEVICES_UUID entry, holding that ordinal's effective limits (Config::MemoryLimit,
// SmLimit, SmSoftLimit) and uuid. With disable_control: no limits at all.
// REQUIRES: config is valid (ParseConfig/ParseEnviron without errors).
LimitSet LimitSetFromConfig(const Config& config, Authority authority);

}  // namespace vgpu::ledger
