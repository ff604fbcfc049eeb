#include "interpose/runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/log.h"

namespace vgpu {
namespace {

// Never destroyed: hooks may run during exit, after static destructors.
alignas(Runtime) unsigned char g_runtime_storage[sizeof(Runtime)];
Runtime* g_runtime = nullptr;
pthread_once_t g_runtime_once = PTHREAD_ONCE_INIT;

void LogMultiline(LogLevel level, const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    VGPU_LOG_UNLIMITED(level, "  %.*s", static_cast<int>(end - start), text.data() + start);
    start = end + 1;
  }
}

void InitRuntime() {
  auto* rt = new (g_runtime_storage) Runtime();
  ConfigResult parsed = ParseEnviron(environ);
  rt->config = std::move(parsed.config);
  rt->config_ok = parsed.ok();
  SetLogLevel(rt->config.log_level);
  for (const ConfigError& error : parsed.errors) {
    std::string message = error.Message();
    if (message.rfind("vgpu: ", 0) == 0) message.erase(0, 6);  // LogWrite adds its own prefix
    VGPU_LOG_UNLIMITED(LogLevel::kError, "%s", message.c_str());
  }
  for (const ConfigError& warning : parsed.warnings) {
    VGPU_INFO("ignored because CUDA_DISABLE_CONTROL is set: %s", warning.Message().c_str());
  }
  if (!rt->config_ok) {
    VGPU_LOG_UNLIMITED(LogLevel::kError,
                       "invalid configuration: CUDA and NVML initialisation will be refused "
                       "(fix the variables above, or set CUDA_DISABLE_CONTROL=true to run "
                       "without vgpu)");
  } else if (rt->passthrough()) {
    VGPU_INFO("CUDA_DISABLE_CONTROL is set: forwarding every call untouched");
  }
  if (LogEnabled(LogLevel::kInfo)) {
    VGPU_LOG_UNLIMITED(LogLevel::kInfo, "effective configuration:");
    LogMultiline(LogLevel::kInfo, rt->config.Describe());
  }
  g_runtime = rt;
}

}  // namespace

const Runtime& GetRuntime() {
  pthread_once(&g_runtime_once, InitRuntime);
  return *g_runtime;
}

}  // namespace vgpu
