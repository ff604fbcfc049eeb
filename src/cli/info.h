// `vgpu info`: what vgpu would use on this machine and what is configured.
//
// GatherInfo is the edge (dlopen, getenv, file system); FormatInfo is a pure function of the
// gathered report, so the output is tested with made-up reports.
#pragma once

#include <ostream>
#include <span>
#include <string>

#include "cli/args.h"
#include "cli/driver.h"
#include "cli/library_path.h"
#include "common/config.h"

namespace vgpu::cli {

std::span<const OptionSpec> InfoOptions();

struct InfoReport {
  LibraryLookup library;     // as `vgpu run` would find it
  DriverInfo driver;
  NvmlInfo nvml;             // not probed (loaded=false, error empty) when there is no driver
  ConfigResult config;       // ParseEnviron over the current environment
};

InfoReport GatherInfo(const std::string& library_flag);

std::string FormatInfo(const InfoReport& report);

// Exit status: 0, or 1 when the environment's configuration is invalid (errors listed).
int InfoMain(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace vgpu::cli
