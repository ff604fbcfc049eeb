#include "cli/info.h"

#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <sstream>

extern char** environ;

namespace vgpu::cli {
namespace {

constexpr std::array kInfoOptions = {
    OptionSpec{"library", 0, "PATH", "Report PATH as the library, as `vgpu run --library PATH` would use it."},
    OptionSpec{"help", 'h', "", "Show this help."},
};

void FormatDevices(const NvmlInfo& nvml, std::ostream& text) {
  if (!nvml.loaded) {
    text << "devices:  unknown (NVML: " << (nvml.error.empty() ? "not probed" : nvml.error) << ")\n";
    return;
  }
  if (!nvml.driver_version.empty()) text << "NVML:     driver " << nvml.driver_version << "\n";
  if (!nvml.error.empty()) text << "devices:  unknown (" << nvml.error << ")\n";
  if (nvml.error.empty() && nvml.devices.empty()) text << "devices:  none\n";
  for (const NvmlDeviceInfo& device : nvml.devices) {
    text << "  GPU " << device.index << ": " << (device.name.empty() ? "?" : device.name);
    if (!device.uuid.empty()) text << "  " << device.uuid;
    if (device.memory_total) {
      text << "\n         memory " << FormatSize(*device.memory_total) << " total, "
           << FormatSize(device.memory_free.value_or(0)) << " free, "
           << FormatSize(device.memory_used.value_or(0)) << " used";
    }
    if (!device.error.empty()) text << "\n         error: " << device.error;
    text << "\n";
  }
}

}  // namespace

std::span<const OptionSpec> InfoOptions() { return kInfoOptions; }

InfoReport GatherInfo(const std::string& library_flag) {
  InfoReport report;
  report.library = FindLibrary(LibrarySearchFromProcess(library_flag), IsRegularFile);
  if (report.library.ok()) report.library.path = AbsolutePath(report.library.path);
  report.driver = ProbeDriver();
  if (report.driver.found) report.nvml = ProbeNvml();
  report.config = ParseEnviron(environ);
  return report;
}

std::string FormatInfo(const InfoReport& report) {
  std::ostringstream text;
  text << "vgpu " << VGPU_VERSION << "\n";
  if (report.library.ok()) {
    text << "library:  " << report.library.path << " (" << report.library.source << ")\n";
  } else {
    text << "library:  none: " << report.library.error << "\n";
  }
  const DriverInfo& driver = report.driver;
  if (!driver.found) {
    text << "driver:   no NVIDIA driver found (libcuda.so.1: " << driver.error << ")\n";
  } else {
    text << "driver:   " << driver.path
         << (driver.simulated ? " (SIMULATED: the project's test double, not a GPU)" : " (NVIDIA)");
    if (driver.version) text << ", CUDA " << FormatCudaVersion(*driver.version);
    text << "\n";
    FormatDevices(report.nvml, text);
  }
  text << "configuration from the environment:\n";
  std::string described = report.config.config.Describe();
  if (report.config.ok() && described.empty()) described = "no limits set";
  std::istringstream lines(described);
  for (std::string line; std::getline(lines, line);) text << "  " << line << "\n";
  for (const ConfigError& error : report.config.errors) text << "  " << error.Message() << "\n";
  for (const ConfigError& warning : report.config.warnings) {
    text << "  ignored (CUDA_DISABLE_CONTROL is set): " << warning.Message() << "\n";
  }
  return text.str();
}

int InfoMain(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  if (!args.operands.empty()) {
    err << "vgpu info: unexpected argument \"" << args.operands[0] << "\"\n";
    return 2;
  }
  const InfoReport report = GatherInfo(args.Last("library").value_or(""));
  out << FormatInfo(report);
  return report.config.ok() ? 0 : 1;
}

}  // namespace vgpu::cli
