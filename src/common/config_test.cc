// Unit tests for the configuration model: every dialect variable, precedence,
// malformed input, contradictions, CUDA_DISABLE_CONTROL, Describe(), and a bounded fuzz.

#include "common/config.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace vgpu {
namespace {

using Env = std::map<std::string, std::string>;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr char kSizeExpected[] = "expected a size such as 4GiB, 512MiB, 1g or 1073741824";
constexpr char kUuidA[] = "GPU-c496852d-f5df-316c-e2d5-86f0b322ec4c";
constexpr char kUuidB[] = "GPU-84ccfef5-2da2-1225-4836-7d347036f968";

ConfigResult ParseLookup(const Env& env) {
  return ParseConfig([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// Environ-style copy of `env` (plus optional extra raw entries, which come first).
ConfigResult ParseEnvp(const Env& env, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> entries = extra;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  return ParseEnviron(envp.data());
}

std::string Names(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const ConfigError& e : errors) out += e.variable + (e.other_variable.empty() ? "" : "/" + e.other_variable) + " ";
  return out;
}

std::string Messages(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const ConfigError& e : errors) out += e.Message() + "\n";
  return out;
}

// Both entry points must agree on everything a lookup can see.
ConfigResult Parse(const Env& env) {
  ConfigResult by_lookup = ParseLookup(env);
  ConfigResult by_environ = ParseEnvp(env);
  EXPECT_EQ(Names(by_lookup.errors), Names(by_environ.errors));
  EXPECT_EQ(Names(by_lookup.warnings), Names(by_environ.warnings));
  EXPECT_EQ(by_lookup.config.Describe(), by_environ.config.Describe());
  return by_lookup;
}

// ---- every dialect variable, valid values -----------------------------------------------------

struct ValidCase {
  const char* name;
  Env env;
  std::function<void(const Config&)> check;
};

void ExpectMemory(const Config& c, uint64_t all_others, std::map<int, uint64_t> overrides) {
  for (int i = 0; i < kMaxDevices; ++i) {
    const uint64_t expected = overrides.count(i) ? overrides[i] : all_others;
    EXPECT_EQ(c.MemoryLimit(i), expected) << "device " << i;
  }
}

void ExpectSm(const Config& c, int all_others, std::map<int, int> overrides) {
  for (int i = 0; i < kMaxDevices; ++i) {
    const int expected = overrides.count(i) ? overrides[i] : all_others;
    EXPECT_EQ(c.SmLimit(i), expected) << "device " << i;
  }
}

std::vector<ValidCase> ValidCases() {
  return {
      {"nothing set: defaults", {}, [](const Config& c) {
         EXPECT_FALSE(c.disable_control);
         EXPECT_FALSE(c.HasAnyMemoryLimit());
         EXPECT_FALSE(c.HasAnySmLimit());
         EXPECT_EQ(c.core_policy, CorePolicy::kDefault);
         EXPECT_EQ(c.task_priority, 1);
         EXPECT_FALSE(c.oversubscribe);
         EXPECT_EQ(c.shared_cache_path, "");
         EXPECT_TRUE(c.device_uuids.empty());
         EXPECT_EQ(c.log_level, LogLevel::kError);
       }},
      {"CUDA_DEVICE_MEMORY_LIMIT", {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}},
       [](const Config& c) { ExpectMemory(c, kGiB, {}); }},
      {"CUDA_DEVICE_MEMORY_LIMIT_<i>", {{"CUDA_DEVICE_MEMORY_LIMIT_3", "2g"}}, [](const Config& c) {
         ExpectMemory(c, 0, {{3, 2 * kGiB}});
         EXPECT_TRUE(c.HasAnyMemoryLimit());
       }},
      {"CUDA_DEVICE_MEMORY_LIMIT_15 (last index)", {{"CUDA_DEVICE_MEMORY_LIMIT_15", "1m"}},
       [](const Config& c) { ExpectMemory(c, 0, {{15, kMiB}}); }},
      {"CUDA_MEM_LIMIT_<i>", {{"CUDA_MEM_LIMIT_0", "1000m"}, {"CUDA_MEM_LIMIT_1", "1000m"}},
       [](const Config& c) { ExpectMemory(c, 0, {{0, 1000 * kMiB}, {1, 1000 * kMiB}}); }},
      {"CUDA_MEM_LIMIT", {{"CUDA_MEM_LIMIT", "2g"}}, [](const Config& c) { ExpectMemory(c, 2 * kGiB, {}); }},
      {"WRAPPER_MAX_MEMORY", {{"WRAPPER_MAX_MEMORY", "1073741824"}},
       [](const Config& c) { ExpectMemory(c, kGiB, {}); }},
      {"per-device override of all-device memory",
       {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"}},
       [](const Config& c) { ExpectMemory(c, kGiB, {{1, 2 * kGiB}}); }},
      {"alias per-device overrides canonical all-device",
       {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_MEM_LIMIT_2", "3g"}},
       [](const Config& c) { ExpectMemory(c, kGiB, {{2, 3 * kGiB}}); }},
      {"per-device smaller than all-device", {{"WRAPPER_MAX_MEMORY", "4294967296"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}},
       [](const Config& c) { ExpectMemory(c, 4 * kGiB, {{0, kGiB}}); }},
      {"CUDA_DEVICE_SM_LIMIT", {{"CUDA_DEVICE_SM_LIMIT", "30"}}, [](const Config& c) { ExpectSm(c, 30, {}); }},
      {"CUDA_DEVICE_SM_LIMIT=0 is no limit", {{"CUDA_DEVICE_SM_LIMIT", "0"}},
       [](const Config& c) { EXPECT_FALSE(c.HasAnySmLimit()); }},
      {"CUDA_DEVICE_SM_LIMIT=100 is no limit", {{"CUDA_DEVICE_SM_LIMIT", "100"}},
       [](const Config& c) { EXPECT_FALSE(c.HasAnySmLimit()); }},
      {"CUDA_DEVICE_SM_LIMIT=1", {{"CUDA_DEVICE_SM_LIMIT", "1%"}}, [](const Config& c) { ExpectSm(c, 1, {}); }},
      {"CUDA_DEVICE_SM_LIMIT_<i>", {{"CUDA_DEVICE_SM_LIMIT_2", "50"}}, [](const Config& c) { ExpectSm(c, 0, {{2, 50}}); }},
      {"per-device 0 lifts the all-device limit", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_1", "0"}},
       [](const Config& c) { ExpectSm(c, 30, {{1, 0}}); }},
      {"per-device 100 lifts the all-device limit", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_1", "100"}},
       [](const Config& c) { ExpectSm(c, 30, {{1, 0}}); }},
      {"CUDA_CORE_LIMIT", {{"CUDA_CORE_LIMIT", "50"}}, [](const Config& c) { ExpectSm(c, 50, {}); }},
      {"CUDA_CORE_LIMIT_<i>", {{"CUDA_CORE_LIMIT_1", "40"}}, [](const Config& c) { ExpectSm(c, 0, {{1, 40}}); }},
      {"CUDA_CORE_SOFT_LIMIT", {{"CUDA_CORE_LIMIT", "50"}, {"CUDA_CORE_SOFT_LIMIT", "60"}}, [](const Config& c) {
         EXPECT_EQ(c.sm_soft_limit, 60);
         EXPECT_EQ(c.SmSoftLimit(0), 60);
         EXPECT_EQ(c.SmSoftLimit(15), 60);
       }},
      {"soft equal to hard", {{"CUDA_CORE_LIMIT", "50"}, {"CUDA_CORE_SOFT_LIMIT", "50"}},
       [](const Config& c) { EXPECT_EQ(c.SmSoftLimit(3), 50); }},
      {"CUDA_CORE_SOFT_LIMIT_<i>", {{"CUDA_DEVICE_SM_LIMIT", "50"}, {"CUDA_CORE_SOFT_LIMIT_1", "80"}},
       [](const Config& c) {
         EXPECT_EQ(c.SmSoftLimit(1), 80);
         EXPECT_EQ(c.SmSoftLimit(0), 0);
       }},
      {"soft limit for a device without a hard limit is harmless",
       {{"CUDA_DEVICE_SM_LIMIT_0", "30"}, {"CUDA_CORE_SOFT_LIMIT", "60"}},
       [](const Config& c) { EXPECT_EQ(c.SmSoftLimit(1), 60); }},
      {"CUDA_CORE_SOFT_LIMIT=0 is none", {{"CUDA_CORE_SOFT_LIMIT", "0"}}, [](const Config& c) { EXPECT_EQ(c.sm_soft_limit, 0); }},
      {"policy force", {{"GPU_CORE_UTILIZATION_POLICY", "force"}},
       [](const Config& c) { EXPECT_EQ(c.core_policy, CorePolicy::kForce); }},
      {"policy FORCE", {{"GPU_CORE_UTILIZATION_POLICY", " FORCE "}},
       [](const Config& c) { EXPECT_EQ(c.core_policy, CorePolicy::kForce); }},
      {"policy Disable", {{"GPU_CORE_UTILIZATION_POLICY", "Disable"}},
       [](const Config& c) { EXPECT_EQ(c.core_policy, CorePolicy::kDisable); }},
      {"policy default", {{"GPU_CORE_UTILIZATION_POLICY", "default"}},
       [](const Config& c) { EXPECT_EQ(c.core_policy, CorePolicy::kDefault); }},
      {"policy disable with a limit (as HAMi's plugin sets it)",
       {{"GPU_CORE_UTILIZATION_POLICY", "disable"}, {"CUDA_DEVICE_SM_LIMIT", "30"}},
       [](const Config& c) { ExpectSm(c, 30, {}); }},
      {"priority 0", {{"CUDA_TASK_PRIORITY", "0"}}, [](const Config& c) { EXPECT_EQ(c.task_priority, 0); }},
      {"priority max", {{"CUDA_TASK_PRIORITY", "100"}}, [](const Config& c) { EXPECT_EQ(c.task_priority, 100); }},
      {"CUDA_OVERSUBSCRIBE", {{"CUDA_OVERSUBSCRIBE", "true"}}, [](const Config& c) { EXPECT_TRUE(c.oversubscribe); }},
      {"turns by default", {}, [](const Config& c) { EXPECT_TRUE(c.compute_turns); }},
      {"VGPU_COMPUTE_TURNS off", {{"VGPU_COMPUTE_TURNS", "false"}}, [](const Config& c) { EXPECT_FALSE(c.compute_turns); }},
      {"light measurement by default", {}, [](const Config& c) { EXPECT_TRUE(c.compute_light); }},
      {"VGPU_COMPUTE_LIGHT off", {{"VGPU_COMPUTE_LIGHT", "off"}}, [](const Config& c) { EXPECT_FALSE(c.compute_light); }},
      {"run hold by default", {}, [](const Config& c) { EXPECT_TRUE(c.compute_run_hold); }},
      {"give way by default", {}, [](const Config& c) { EXPECT_TRUE(c.compute_give_way); }},
      {"VGPU_COMPUTE_GIVE_WAY off", {{"VGPU_COMPUTE_GIVE_WAY", "0"}},
       [](const Config& c) { EXPECT_FALSE(c.compute_give_way); }},
      {"VGPU_COMPUTE_RUN_HOLD off", {{"VGPU_COMPUTE_RUN_HOLD", "false"}},
       [](const Config& c) { EXPECT_FALSE(c.compute_run_hold); }},
      {"runs of 50 ms by default", {}, [](const Config& c) { EXPECT_EQ(c.compute_period_ms, 50); }},
      {"VGPU_COMPUTE_PERIOD 1s", {{"VGPU_COMPUTE_PERIOD", "1s"}}, [](const Config& c) { EXPECT_EQ(c.compute_period_ms, 1000); }},
      {"VGPU_COMPUTE_PERIOD 250ms", {{"VGPU_COMPUTE_PERIOD", " 250ms "}}, [](const Config& c) { EXPECT_EQ(c.compute_period_ms, 250); }},
      {"VGPU_COMPUTE_PERIOD off", {{"VGPU_COMPUTE_PERIOD", "off"}}, [](const Config& c) { EXPECT_EQ(c.compute_period_ms, 0); }},
      {"VGPU_COMPUTE_PERIOD 0", {{"VGPU_COMPUTE_PERIOD", "0"}}, [](const Config& c) { EXPECT_EQ(c.compute_period_ms, 0); }},
      {"no compute trace by default", {}, [](const Config& c) { EXPECT_EQ(c.compute_trace_path, ""); }},
      {"VGPU_COMPUTE_TRACE", {{"VGPU_COMPUTE_TRACE", " /tmp/t.%p "}},
       [](const Config& c) { EXPECT_EQ(c.compute_trace_path, "/tmp/t.%p"); }},
      {"CUDA_MEMORY_OVERSUBSCRIBE", {{"CUDA_MEMORY_OVERSUBSCRIBE", "1"}}, [](const Config& c) { EXPECT_TRUE(c.oversubscribe); }},
      {"oversubscription spills as much as the memory limit by default",
       {{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"}},
       [](const Config& c) {
         EXPECT_EQ(c.oversubscribe_host_limit, 0u);
         EXPECT_EQ(c.HostSpillLimit(0), kGiB);
         EXPECT_EQ(c.HostSpillLimit(1), 2 * kGiB);
         EXPECT_EQ(c.HostSpillLimitAll(), kGiB);
       }},
      {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", {{"CUDA_MEMORY_OVERSUBSCRIBE", "yes"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                                         {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4GiB"}},
       [](const Config& c) {
         EXPECT_EQ(c.oversubscribe_host_limit, 4 * kGiB);
         EXPECT_EQ(c.HostSpillLimit(0), 4 * kGiB);
         EXPECT_EQ(c.HostSpillLimit(15), 4 * kGiB);
         EXPECT_EQ(c.HostSpillLimit(16), 0u);
         EXPECT_EQ(c.HostSpillLimitAll(), 4 * kGiB);
       }},
      {"no oversubscription, no spilling", {{"CUDA_OVERSUBSCRIBE", "false"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}},
       [](const Config& c) {
         EXPECT_EQ(c.HostSpillLimit(0), 0u);
         EXPECT_EQ(c.HostSpillLimitAll(), 0u);
       }},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/a.cache"}},
       [](const Config& c) { EXPECT_EQ(c.shared_cache_path, "/tmp/vgpu/a.cache"); }},
      {"GPU_DEVICES_UUID one", {{"GPU_DEVICES_UUID", kUuidA}},
       [](const Config& c) { EXPECT_EQ(c.device_uuids, std::vector<std::string>{kUuidA}); }},
      {"GPU_DEVICES_UUID two, blanks", {{"GPU_DEVICES_UUID", std::string(kUuidA) + " , " + kUuidB + " "}},
       [](const Config& c) { EXPECT_EQ(c.device_uuids, (std::vector<std::string>{kUuidA, kUuidB})); }},
      {"GPU_DEVICES_UUID MIG", {{"GPU_DEVICES_UUID", "MIG-C496852D-F5DF-316C-E2D5-86F0B322EC4C"}},
       [](const Config& c) { EXPECT_EQ(c.device_uuids.size(), 1u); }},
      {"CUDA_DISABLE_CONTROL=false keeps limits", {{"CUDA_DISABLE_CONTROL", "false"}, {"CUDA_DEVICE_SM_LIMIT", "30"}},
       [](const Config& c) {
         EXPECT_FALSE(c.disable_control);
         ExpectSm(c, 30, {});
       }},
      // Same value in two dialects is fine.
      {"same memory, two spellings", {{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}, {"CUDA_MEM_LIMIT_0", "1024m"}},
       [](const Config& c) { ExpectMemory(c, 0, {{0, kGiB}}); }},
      {"same memory, WRAPPER_MAX_MEMORY", {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"WRAPPER_MAX_MEMORY", "1073741824"}},
       [](const Config& c) { ExpectMemory(c, kGiB, {}); }},
      {"same no-limit, two spellings", {{"CUDA_DEVICE_SM_LIMIT", "100"}, {"CUDA_CORE_LIMIT", "0"}},
       [](const Config& c) { EXPECT_FALSE(c.HasAnySmLimit()); }},
      {"same compute limit", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_LIMIT", "30%"}},
       [](const Config& c) { ExpectSm(c, 30, {}); }},
      {"same oversubscribe", {{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_MEMORY_OVERSUBSCRIBE", "yes"}},
       [](const Config& c) { EXPECT_TRUE(c.oversubscribe); }},
      {"same log level, two scales", {{"LIBCUDA_LOG_LEVEL", "3"}, {"LOGGER_LEVEL", "1"}},
       [](const Config& c) { EXPECT_EQ(c.log_level, LogLevel::kInfo); }},
      // Empty values count as unset.
      {"empty values are unset",
       {{"CUDA_DEVICE_MEMORY_LIMIT", ""}, {"CUDA_DEVICE_SM_LIMIT", ""}, {"CUDA_DISABLE_CONTROL", ""},
        {"LIBCUDA_LOG_LEVEL", ""}, {"GPU_DEVICES_UUID", ""}, {"CUDA_DEVICE_MEMORY_LIMIT_16", ""}},
       [](const Config& c) {
         EXPECT_FALSE(c.disable_control);
         EXPECT_FALSE(c.HasAnyMemoryLimit());
         EXPECT_FALSE(c.HasAnySmLimit());
         EXPECT_EQ(c.log_level, LogLevel::kError);
       }},
  };
}

TEST(ParseConfigTest, ValidDialects) {
  for (const ValidCase& c : ValidCases()) {
    SCOPED_TRACE(c.name);
    const ConfigResult result = Parse(c.env);
    ASSERT_TRUE(result.ok()) << Messages(result.errors);
    EXPECT_TRUE(result.warnings.empty());
    c.check(result.config);
  }
}

TEST(ParseConfigTest, LogLevelMapping) {
  const LogLevel libcuda[] = {LogLevel::kError, LogLevel::kWarn,  LogLevel::kWarn,
                              LogLevel::kInfo,  LogLevel::kDebug, LogLevel::kTrace};
  const LogLevel logger[] = {LogLevel::kInfo, LogLevel::kInfo,  LogLevel::kInfo,
                             LogLevel::kInfo, LogLevel::kDebug, LogLevel::kTrace};
  for (int value = 0; value <= 5; ++value) {
    const ConfigResult a = Parse({{"LIBCUDA_LOG_LEVEL", std::to_string(value)}});
    ASSERT_TRUE(a.ok()) << Messages(a.errors);
    EXPECT_EQ(a.config.log_level, libcuda[value]) << "LIBCUDA_LOG_LEVEL=" << value;
    const ConfigResult b = Parse({{"LOGGER_LEVEL", std::to_string(value)}});
    ASSERT_TRUE(b.ok()) << Messages(b.errors);
    EXPECT_EQ(b.config.log_level, logger[value]) << "LOGGER_LEVEL=" << value;
  }
}

TEST(ConfigTest, AccessorsOutOfRange) {
  Config c;
  c.memory_limit_all = kGiB;
  c.sm_limit_all = 30;
  c.sm_soft_limit = 60;
  for (int device : {-1, kMaxDevices, 1000}) {
    EXPECT_EQ(c.MemoryLimit(device), 0u);
    EXPECT_EQ(c.SmLimit(device), 0);
    EXPECT_EQ(c.SmSoftLimit(device), 0);
  }
}

// ---- malformed values ---------------------------------------------------------------------------

struct BadCase {
  Env env;
  const char* variable;     // the one error names this variable
  const char* reason_part;  // substring of its reason
  bool environ_only = false;  // only ParseEnviron can see this variable name
};

std::vector<BadCase> BadCases() {
  const std::string a = kUuidA, b = kUuidB;
  std::string seventeen;
  for (int i = 0; i < 17; ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "%sGPU-%08x-0000-0000-0000-000000000000", i ? "," : "", i);
    seventeen += uuid;
  }
  return {
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}, "CUDA_DEVICE_MEMORY_LIMIT", kSizeExpected},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "-1"}}, "CUDA_DEVICE_MEMORY_LIMIT", "negative"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "18446744073709551616"}}, "CUDA_DEVICE_MEMORY_LIMIT", "64 bits"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "16EiB"}}, "CUDA_DEVICE_MEMORY_LIMIT", "64 bits"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "1.5x"}}, "CUDA_DEVICE_MEMORY_LIMIT", kSizeExpected},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "1.2.3g"}}, "CUDA_DEVICE_MEMORY_LIMIT", kSizeExpected},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "1e9"}}, "CUDA_DEVICE_MEMORY_LIMIT", "exponent"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "0"}}, "CUDA_DEVICE_MEMORY_LIMIT", "0 bytes is not allowed"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "0.0001k"}}, "CUDA_DEVICE_MEMORY_LIMIT", "0 bytes is not allowed"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", " "}}, "CUDA_DEVICE_MEMORY_LIMIT", "blank"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT_0", "abc"}}, "CUDA_DEVICE_MEMORY_LIMIT_0", kSizeExpected},
      {{{"CUDA_MEM_LIMIT_1", "-5g"}}, "CUDA_MEM_LIMIT_1", "negative"},
      {{{"CUDA_MEM_LIMIT", "0m"}}, "CUDA_MEM_LIMIT", "0 bytes"},
      {{{"WRAPPER_MAX_MEMORY", "1g"}}, "WRAPPER_MAX_MEMORY", "plain number of bytes"},
      {{{"WRAPPER_MAX_MEMORY", "1.5"}}, "WRAPPER_MAX_MEMORY", "plain number of bytes"},
      {{{"WRAPPER_MAX_MEMORY", "0"}}, "WRAPPER_MAX_MEMORY", "0 bytes"},
      {{{"WRAPPER_MAX_MEMORY", "99999999999999999999"}}, "WRAPPER_MAX_MEMORY", "64 bits"},
      {{{"CUDA_DEVICE_SM_LIMIT", "101"}}, "CUDA_DEVICE_SM_LIMIT", "above 100"},
      {{{"CUDA_DEVICE_SM_LIMIT", "-1"}}, "CUDA_DEVICE_SM_LIMIT", "negative"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30.5"}}, "CUDA_DEVICE_SM_LIMIT", "whole percentage"},
      {{{"CUDA_DEVICE_SM_LIMIT", "abc"}}, "CUDA_DEVICE_SM_LIMIT", "whole percentage"},
      {{{"CUDA_DEVICE_SM_LIMIT", "1e2"}}, "CUDA_DEVICE_SM_LIMIT", "whole percentage"},
      {{{"CUDA_DEVICE_SM_LIMIT_3", "200"}}, "CUDA_DEVICE_SM_LIMIT_3", "above 100"},
      {{{"CUDA_CORE_LIMIT", "150"}}, "CUDA_CORE_LIMIT", "above 100"},
      {{{"CUDA_CORE_LIMIT_2", "x"}}, "CUDA_CORE_LIMIT_2", "whole percentage"},
      {{{"CUDA_CORE_SOFT_LIMIT", "abc"}}, "CUDA_CORE_SOFT_LIMIT", "no soft limit"},
      {{{"CUDA_CORE_SOFT_LIMIT_2", "101"}}, "CUDA_CORE_SOFT_LIMIT_2", "above 100"},
      {{{"CUDA_OVERSUBSCRIBE", "maybe"}}, "CUDA_OVERSUBSCRIBE", "true or false"},
      {{{"VGPU_COMPUTE_TURNS", "sometimes"}}, "VGPU_COMPUTE_TURNS", "true or false"},
      {{{"VGPU_COMPUTE_LIGHT", "light"}}, "VGPU_COMPUTE_LIGHT", "true or false"},
      {{{"VGPU_COMPUTE_RUN_HOLD", "300us"}}, "VGPU_COMPUTE_RUN_HOLD", "true or false"},
      {{{"VGPU_COMPUTE_GIVE_WAY", "sometimes"}}, "VGPU_COMPUTE_GIVE_WAY", "true or false"},
      {{{"VGPU_COMPUTE_PERIOD", "1"}}, "VGPU_COMPUTE_PERIOD", "from 10ms to 5s"},
      {{{"VGPU_COMPUTE_TRACE", "trace.txt"}}, "VGPU_COMPUTE_TRACE", "absolute file path"},
      {{{"VGPU_COMPUTE_TRACE", "/tmp/traces/"}}, "VGPU_COMPUTE_TRACE", "absolute file path"},
      {{{"VGPU_COMPUTE_PERIOD", "5ms"}}, "VGPU_COMPUTE_PERIOD", "from 10ms to 5s"},
      {{{"VGPU_COMPUTE_PERIOD", "10s"}}, "VGPU_COMPUTE_PERIOD", "from 10ms to 5s"},
      {{{"VGPU_COMPUTE_PERIOD", "1.5s"}}, "VGPU_COMPUTE_PERIOD", "from 10ms to 5s"},
      {{{"VGPU_COMPUTE_PERIOD", "-1s"}}, "VGPU_COMPUTE_PERIOD", "from 10ms to 5s"},
      {{{"CUDA_MEMORY_OVERSUBSCRIBE", "2"}}, "CUDA_MEMORY_OVERSUBSCRIBE", "true or false"},
      {{{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4GiB"}}, "CUDA_OVERSUBSCRIBE_HOST_LIMIT", "needs memory oversubscription"},
      {{{"CUDA_DISABLE_CONTROL", "yes please"}}, "CUDA_DISABLE_CONTROL", "true or false"},
      {{{"GPU_CORE_UTILIZATION_POLICY", "strict"}}, "GPU_CORE_UTILIZATION_POLICY", "force, disable or default"},
      {{{"GPU_CORE_UTILIZATION_POLICY", "forced"}}, "GPU_CORE_UTILIZATION_POLICY", "force, disable or default"},
      {{{"CUDA_TASK_PRIORITY", "-1"}}, "CUDA_TASK_PRIORITY", "from 0 (highest priority) to 100"},
      {{{"CUDA_TASK_PRIORITY", "high"}}, "CUDA_TASK_PRIORITY", "whole number"},
      {{{"CUDA_TASK_PRIORITY", "101"}}, "CUDA_TASK_PRIORITY", "whole number"},
      {{{"CUDA_TASK_PRIORITY", "1.5"}}, "CUDA_TASK_PRIORITY", "whole number"},
      {{{"LIBCUDA_LOG_LEVEL", "6"}}, "LIBCUDA_LOG_LEVEL", "5 (trace)"},
      {{{"LIBCUDA_LOG_LEVEL", "8"}}, "LIBCUDA_LOG_LEVEL", "5 (trace)"},
      {{{"LIBCUDA_LOG_LEVEL", "-1"}}, "LIBCUDA_LOG_LEVEL", "0 (errors only)"},
      {{{"LIBCUDA_LOG_LEVEL", "debug"}}, "LIBCUDA_LOG_LEVEL", "0 (errors only)"},
      {{{"LOGGER_LEVEL", "9"}}, "LOGGER_LEVEL", "vcuda scale"},
      {{{"LOGGER_LEVEL", "x"}}, "LOGGER_LEVEL", "vcuda scale"},
      {{{"LOGGER_LEVEL", "6"}}, "LOGGER_LEVEL", "vcuda scale"},
      {{{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "relative/ledger"}}, "CUDA_DEVICE_MEMORY_SHARED_CACHE", "absolute"},
      {{{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/dir/"}}, "CUDA_DEVICE_MEMORY_SHARED_CACHE", "absolute file path"},
      {{{"GPU_DEVICES_UUID", "GPU-123"}}, "GPU_DEVICES_UUID", "entry 1 \"GPU-123\" is not a GPU UUID"},
      {{{"GPU_DEVICES_UUID", a.substr(4)}}, "GPU_DEVICES_UUID", "is not a GPU UUID"},
      {{{"GPU_DEVICES_UUID", a.substr(0, 39) + "g"}}, "GPU_DEVICES_UUID", "is not a GPU UUID"},
      {{{"GPU_DEVICES_UUID", a + ",," + b}}, "GPU_DEVICES_UUID", "entry 2 is empty"},
      {{{"GPU_DEVICES_UUID", a + ","}}, "GPU_DEVICES_UUID", "entry 2 is empty"},
      {{{"GPU_DEVICES_UUID", a + ";" + b}}, "GPU_DEVICES_UUID", "is not a GPU UUID"},
      {{{"GPU_DEVICES_UUID", a + "," + a}}, "GPU_DEVICES_UUID", "listed twice"},
      {{{"GPU_DEVICES_UUID", seventeen}}, "GPU_DEVICES_UUID", "more than 16 devices"},
      // Device indices out of range.
      {{{"CUDA_DEVICE_MEMORY_LIMIT_16", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_16", "0 to 15"},
      {{{"CUDA_DEVICE_SM_LIMIT_99", "30"}}, "CUDA_DEVICE_SM_LIMIT_99", "0 to 15"},
      {{{"CUDA_CORE_SOFT_LIMIT_127", "30"}}, "CUDA_CORE_SOFT_LIMIT_127", "0 to 15"},
      {{{"CUDA_MEM_LIMIT_01", "1g"}}, "CUDA_MEM_LIMIT_01", "without leading zeros", true},
      {{{"CUDA_CORE_LIMIT_x", "5"}}, "CUDA_CORE_LIMIT_x", "0 to 15", true},
      {{{"CUDA_CORE_SOFT_LIMIT_", "5"}}, "CUDA_CORE_SOFT_LIMIT_", "0 to 15", true},
      {{{"CUDA_DEVICE_MEMORY_LIMIT_-1", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_-1", "0 to 15", true},
      {{{"CUDA_DEVICE_MEMORY_LIMIT_128", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_128", "0 to 15", true},
  };
}

TEST(ParseConfigTest, MalformedValues) {
  for (const BadCase& c : BadCases()) {
    const auto& [name, value] = *c.env.begin();
    SCOPED_TRACE(name + "=" + value);
    const ConfigResult result = c.environ_only ? ParseEnvp(c.env) : Parse(c.env);
    ASSERT_EQ(result.errors.size(), 1u) << Messages(result.errors);
    const ConfigError& error = result.errors[0];
    EXPECT_EQ(error.variable, c.variable);
    EXPECT_EQ(error.value, value);
    EXPECT_EQ(error.other_variable, "");
    EXPECT_NE(error.reason.find(c.reason_part), std::string::npos) << error.reason;
    const std::string message = error.Message();
    EXPECT_EQ(message.rfind("vgpu: invalid " + name + "=\"", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
    if (c.environ_only) {
      EXPECT_TRUE(ParseLookup(c.env).ok());  // a lookup cannot see the name
    }
  }
}

TEST(ParseConfigTest, HostSpillLimitIsValidatedAndNeedsOversubscription) {
  struct Case {
    Env env;
    const char* reason_part;
  };
  const Case cases[] = {
      {{{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4x"}}, kSizeExpected},
      {{{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "0"}}, "0 bytes is not allowed"},
      {{{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "-1g"}}, "negative"},
      {{{"CUDA_OVERSUBSCRIBE", "false"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4GiB"}}, "set CUDA_OVERSUBSCRIBE=true too"},
      {{{"CUDA_MEMORY_OVERSUBSCRIBE", "no"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4GiB"}}, "needs memory oversubscription"},
  };
  for (const Case& c : cases) {
    const std::string value = c.env.at("CUDA_OVERSUBSCRIBE_HOST_LIMIT");
    SCOPED_TRACE(value);
    const ConfigResult result = Parse(c.env);
    ASSERT_EQ(result.errors.size(), 1u) << Messages(result.errors);
    EXPECT_EQ(result.errors[0].variable, "CUDA_OVERSUBSCRIBE_HOST_LIMIT");
    EXPECT_EQ(result.errors[0].value, value);
    EXPECT_NE(result.errors[0].reason.find(c.reason_part), std::string::npos) << result.errors[0].reason;
    EXPECT_EQ(result.errors[0].Message().rfind("vgpu: invalid CUDA_OVERSUBSCRIBE_HOST_LIMIT=\"" + value + "\"", 0), 0u)
        << result.errors[0].Message();
  }
}

TEST(ParseConfigTest, ErrorsAreReportedTogether) {
  const ConfigResult result = Parse({{"CUDA_DEVICE_MEMORY_LIMIT", "12x"},
                                     {"CUDA_DEVICE_SM_LIMIT", "200"},
                                     {"GPU_CORE_UTILIZATION_POLICY", "bogus"}});
  EXPECT_EQ(Names(result.errors), "CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT GPU_CORE_UTILIZATION_POLICY ");
}

TEST(ConfigErrorTest, MessageFormat) {
  const ConfigResult result = Parse({{"CUDA_DEVICE_MEMORY_LIMIT", "12x"}});
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].Message(),
            "vgpu: invalid CUDA_DEVICE_MEMORY_LIMIT=\"12x\": expected a size such as 4GiB, 512MiB, "
            "1g or 1073741824");

  const ConfigError escaped{"X", "a\"b\\c\n\x01", "why", "", ""};
  EXPECT_EQ(escaped.Message(), "vgpu: invalid X=\"a\\\"b\\\\c\\x0a\\x01\": why");

  const ConfigError long_value{"X", std::string(500, 'v'), "why", "", ""};
  EXPECT_EQ(long_value.Message(), "vgpu: invalid X=\"" + std::string(120, 'v') + "...\": why");

  const ConfigError conflict{"A", "1", "differ", "B", "2"};
  EXPECT_EQ(conflict.Message(), "vgpu: conflicting A=\"1\" and B=\"2\": differ");
}

// ---- contradictions -----------------------------------------------------------------------------

struct ConflictCase {
  Env env;
  const char* first;
  const char* second;
  const char* reason_part;
};

TEST(ParseConfigTest, Contradictions) {
  const ConflictCase cases[] = {
      {{{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}, {"CUDA_MEM_LIMIT_0", "2g"}}, "CUDA_DEVICE_MEMORY_LIMIT_0",
       "CUDA_MEM_LIMIT_0", "different memory limits for device 0: 1 GiB = 1073741824 bytes vs 2 GiB"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"WRAPPER_MAX_MEMORY", "2147483648"}}, "CUDA_DEVICE_MEMORY_LIMIT",
       "WRAPPER_MAX_MEMORY", "memory limits for all devices"},
      {{{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_MEM_LIMIT", "2g"}}, "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_MEM_LIMIT",
       "memory limits for all devices"},
      {{{"CUDA_MEM_LIMIT", "1g"}, {"WRAPPER_MAX_MEMORY", "1073741825"}}, "CUDA_MEM_LIMIT", "WRAPPER_MAX_MEMORY",
       "1073741825 bytes"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_LIMIT", "40"}}, "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_LIMIT",
       "compute limits for all devices: 30% vs 40%"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_LIMIT", "0"}}, "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_LIMIT",
       "30% vs no limit"},
      {{{"CUDA_DEVICE_SM_LIMIT_1", "30"}, {"CUDA_CORE_LIMIT_1", "40"}}, "CUDA_DEVICE_SM_LIMIT_1", "CUDA_CORE_LIMIT_1",
       "compute limits for device 1"},
      {{{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_MEMORY_OVERSUBSCRIBE", "false"}}, "CUDA_OVERSUBSCRIBE",
       "CUDA_MEMORY_OVERSUBSCRIBE", "true vs false"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_SOFT_LIMIT", "20"}}, "CUDA_CORE_SOFT_LIMIT", "CUDA_DEVICE_SM_LIMIT",
       "soft limit (20%) is below the hard limit (30%)"},
      {{{"CUDA_CORE_LIMIT_1", "30"}, {"CUDA_CORE_SOFT_LIMIT_1", "20"}}, "CUDA_CORE_SOFT_LIMIT_1", "CUDA_CORE_LIMIT_1",
       "below the hard limit"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_2", "50"}, {"CUDA_CORE_SOFT_LIMIT", "40"}},
       "CUDA_CORE_SOFT_LIMIT", "CUDA_DEVICE_SM_LIMIT_2", "(40%) is below the hard limit (50%)"},
      {{{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_0", "0"}, {"CUDA_CORE_SOFT_LIMIT_0", "50"}},
       "CUDA_CORE_SOFT_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0", "below the hard limit (no limit)"},
      {{{"GPU_CORE_UTILIZATION_POLICY", "force"}, {"CUDA_CORE_LIMIT", "30"}, {"CUDA_CORE_SOFT_LIMIT", "60"}},
       "GPU_CORE_UTILIZATION_POLICY", "CUDA_CORE_SOFT_LIMIT", "force policy"},
      {{{"LIBCUDA_LOG_LEVEL", "0"}, {"LOGGER_LEVEL", "3"}}, "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL", "log levels: error vs info"},
      {{{"LIBCUDA_LOG_LEVEL", "4"}, {"LOGGER_LEVEL", "5"}}, "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL", "debug vs trace"},
  };
  for (const ConflictCase& c : cases) {
    SCOPED_TRACE(std::string(c.first) + " vs " + c.second);
    const ConfigResult result = Parse(c.env);
    ASSERT_EQ(result.errors.size(), 1u) << Messages(result.errors);
    const ConfigError& error = result.errors[0];
    EXPECT_EQ(error.variable, c.first);
    EXPECT_EQ(error.other_variable, c.second);
    EXPECT_EQ(error.value, c.env.at(c.first));
    EXPECT_EQ(error.other_value, c.env.at(c.second));
    EXPECT_NE(error.reason.find(c.reason_part), std::string::npos) << error.reason;
    const std::string expected_start = "vgpu: conflicting " + std::string(c.first) + "=\"" + c.env.at(c.first) +
                                       "\" and " + c.second + "=\"" + c.env.at(c.second) + "\": ";
    EXPECT_EQ(error.Message().rfind(expected_start, 0), 0u) << error.Message();
  }
}

TEST(ParseConfigTest, SoftLimitWithoutHardLimit) {
  const ConfigResult result = Parse({{"CUDA_CORE_SOFT_LIMIT", "50"}});
  ASSERT_EQ(result.errors.size(), 1u) << Messages(result.errors);
  EXPECT_EQ(result.errors[0].variable, "CUDA_CORE_SOFT_LIMIT");
  EXPECT_NE(result.errors[0].reason.find("needs a hard one"), std::string::npos);
  // A hard limit of 100 is no limit, so the soft one still has nothing to relax.
  EXPECT_FALSE(Parse({{"CUDA_CORE_SOFT_LIMIT", "50"}, {"CUDA_CORE_LIMIT", "100"}}).ok());
  // A device-specific soft limit on a device without any hard limit, while others have one.
  const ConfigResult per_device = Parse({{"CUDA_DEVICE_SM_LIMIT_0", "30"}, {"CUDA_CORE_SOFT_LIMIT_1", "80"}});
  ASSERT_EQ(per_device.errors.size(), 1u) << Messages(per_device.errors);
  EXPECT_EQ(per_device.errors[0].variable, "CUDA_CORE_SOFT_LIMIT_1");
  EXPECT_NE(per_device.errors[0].reason.find("device 1 has no compute limit"), std::string::npos);
}

TEST(ParseConfigTest, ThreeWayMemoryContradictionNamesEachPair) {
  const ConfigResult result = Parse(
      {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_MEM_LIMIT", "2g"}, {"WRAPPER_MAX_MEMORY", "3221225472"}});
  EXPECT_EQ(Names(result.errors), "CUDA_DEVICE_MEMORY_LIMIT/CUDA_MEM_LIMIT CUDA_DEVICE_MEMORY_LIMIT/WRAPPER_MAX_MEMORY ");
}

// ---- CUDA_DISABLE_CONTROL -----------------------------------------------------------------------

TEST(ParseConfigTest, DisableControlPrecedence) {
  struct Case {
    const char* name;
    Env env;
    bool ok;
    bool disabled;
    std::string error_names;
    std::string warning_names;
  };
  const Case cases[] = {
      {"true wins over malformed", {{"CUDA_DISABLE_CONTROL", "true"}, {"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}, true, true,
       "", "CUDA_DEVICE_MEMORY_LIMIT "},
      {"1 wins over a contradiction",
       {{"CUDA_DISABLE_CONTROL", "1"}, {"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_LIMIT", "40"}}, true, true, "",
       "CUDA_DEVICE_SM_LIMIT/CUDA_CORE_LIMIT "},
      {"true with valid limits", {{"CUDA_DISABLE_CONTROL", "TRUE"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}, true, true, "", ""},
      {"malformed disable is an error too",
       {{"CUDA_DISABLE_CONTROL", "maybe"}, {"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}, false, false,
       "CUDA_DISABLE_CONTROL CUDA_DEVICE_MEMORY_LIMIT ", ""},
      {"false does not hide errors", {{"CUDA_DISABLE_CONTROL", "false"}, {"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}, false,
       false, "CUDA_DEVICE_MEMORY_LIMIT ", ""},
      {"empty is unset", {{"CUDA_DISABLE_CONTROL", ""}, {"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}, false, false,
       "CUDA_DEVICE_MEMORY_LIMIT ", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ConfigResult result = Parse(c.env);
    EXPECT_EQ(result.ok(), c.ok);
    EXPECT_EQ(result.config.disable_control, c.disabled);
    EXPECT_EQ(Names(result.errors), c.error_names);
    EXPECT_EQ(Names(result.warnings), c.warning_names);
    if (c.disabled) {
      EXPECT_FALSE(result.config.HasAnyMemoryLimit());
      EXPECT_FALSE(result.config.HasAnySmLimit());
    }
  }
}

TEST(ParseConfigTest, DisableControlKeepsLogLevel) {
  const ConfigResult result =
      Parse({{"CUDA_DISABLE_CONTROL", "on"}, {"LIBCUDA_LOG_LEVEL", "4"}, {"CUDA_DEVICE_SM_LIMIT", "30"}});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result.config.log_level, LogLevel::kDebug);
  EXPECT_EQ(result.config.sm_limit_all, 0);
}

// ---- ParseEnviron specifics ---------------------------------------------------------------------

TEST(ParseEnvironTest, FirstEntryWinsAndOddEntriesAreIgnored) {
  const ConfigResult result = ParseEnvp({}, {"CUDA_DEVICE_MEMORY_LIMIT=1g", "CUDA_DEVICE_MEMORY_LIMIT=2g",
                                             "NO_EQUALS_SIGN", "CUDA_DEVICE_MEMORY_LIMITS=junk",
                                             "CUDA_DEVICE_MEMORY_LIMIT_16=", "=x"});
  ASSERT_TRUE(result.ok()) << Messages(result.errors);
  EXPECT_EQ(result.config.MemoryLimit(0), kGiB);
}

TEST(ParseEnvironTest, NullEnvironment) {
  const ConfigResult result = ParseEnviron(nullptr);
  EXPECT_TRUE(result.ok());
  EXPECT_FALSE(result.config.HasAnyMemoryLimit());
}

// ---- Describe -----------------------------------------------------------------------------------

void ExpectContainsLine(const std::string& text, const std::string& line) {
  EXPECT_NE(("\n" + text).find("\n" + line + "\n"), std::string::npos) << "missing line \"" << line << "\" in:\n" << text;
}

TEST(DescribeTest, FullConfiguration) {
  const ConfigResult result = Parse({{"CUDA_DEVICE_MEMORY_LIMIT", "4GiB"},
                                     {"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"},
                                     {"CUDA_DEVICE_SM_LIMIT", "30"},
                                     {"CUDA_DEVICE_SM_LIMIT_2", "0"},
                                     {"CUDA_CORE_SOFT_LIMIT", "60"},
                                     {"CUDA_TASK_PRIORITY", "0"},
                                     {"CUDA_OVERSUBSCRIBE", "true"},
                                     {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/x.cache"},
                                     {"GPU_DEVICES_UUID", std::string(kUuidA) + "," + kUuidB},
                                     {"LIBCUDA_LOG_LEVEL", "3"}});
  ASSERT_TRUE(result.ok()) << Messages(result.errors);
  const std::string text = result.config.Describe();
  ExpectContainsLine(text, "memory limit: 4 GiB (4294967296 bytes) on every device");
  ExpectContainsLine(text, "memory limit on device 1: 2 GiB (2147483648 bytes)");
  ExpectContainsLine(text, "compute limit: 30% on every device");
  ExpectContainsLine(text, "compute limit on device 2: no limit");
  ExpectContainsLine(text, "soft compute limit: 60% on every device");
  ExpectContainsLine(text, "core policy: default");
  ExpectContainsLine(text, "task priority: 0 (highest)");
  ExpectContainsLine(text, "oversubscribe: yes, spilling at most as much as the memory limit of host memory per device");
  ExpectContainsLine(text, "ledger: /tmp/vgpu/x.cache");
  ExpectContainsLine(text, std::string("device 0 uuid: ") + kUuidA);
  ExpectContainsLine(text, std::string("device 1 uuid: ") + kUuidB);
  ExpectContainsLine(text, "log level: info");
  EXPECT_EQ(text.find("memory limit on device 0"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

// The compute switches are listed only when not at their defaults: the variable, a value that
// changes it, the line Describe() then shows, and the line's label (absent by default).
TEST(DescribeTest, ComputeSwitchesOffTheirDefaultsAreListed) {
  struct Switch {
    const char* variable;
    const char* value;
    const char* line;
    const char* label;
  };
  for (const Switch& s : {
           Switch{"VGPU_COMPUTE_TURNS", "0", "compute turns: off", "compute turns"},
           Switch{"VGPU_COMPUTE_LIGHT", "false", "light measurement: off", "light measurement"},
           Switch{"VGPU_COMPUTE_RUN_HOLD", "off", "run hold: off (a run holds the turn only while its work is claimed)",
                  "run hold"},
           Switch{"VGPU_COMPUTE_GIVE_WAY", "false", "give way: off (a run keeps its queue while a waiter below its limit waits)",
                  "give way"},
       }) {
    SCOPED_TRACE(s.variable);
    const ConfigResult result = Parse({{s.variable, s.value}});
    ASSERT_TRUE(result.ok()) << Messages(result.errors);
    ExpectContainsLine(result.config.Describe(), s.line);
    EXPECT_EQ(Parse({}).config.Describe().find(s.label), std::string::npos);
  }
}

TEST(DescribeTest, ComputePeriodIsListed) {
  const ConfigResult result = Parse({{"VGPU_COMPUTE_PERIOD", "1s"}});
  ASSERT_TRUE(result.ok()) << Messages(result.errors);
  ExpectContainsLine(result.config.Describe(), "compute period: 1000 ms (runs of share x period)");
  ExpectContainsLine(Parse({{"VGPU_COMPUTE_PERIOD", "off"}}).config.Describe(), "compute period: off (bursts, launch by launch)");
  EXPECT_EQ(Parse({}).config.Describe().find("compute period"), std::string::npos);  // the default
}

TEST(DescribeTest, HostSpillLimit) {
  const ConfigResult result = Parse({{"CUDA_OVERSUBSCRIBE", "1"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "3g"}});
  ASSERT_TRUE(result.ok()) << Messages(result.errors);
  ExpectContainsLine(result.config.Describe(),
                     "oversubscribe: yes, spilling at most 3 GiB (3221225472 bytes) of host memory per device");
}

TEST(DescribeTest, DefaultsAndPerDeviceOnly) {
  const std::string defaults = Config().Describe();
  EXPECT_EQ(defaults,
            "memory limit: none\ncompute limit: none\ncore policy: default\ntask priority: 1\nlog level: error\n");
  const ConfigResult result = Parse({{"CUDA_MEM_LIMIT_0", "1g"}, {"CUDA_CORE_LIMIT_3", "25"}});
  ASSERT_TRUE(result.ok());
  const std::string text = result.config.Describe();
  ExpectContainsLine(text, "memory limit: only on the devices listed below");
  ExpectContainsLine(text, "memory limit on device 0: 1 GiB (1073741824 bytes)");
  ExpectContainsLine(text, "compute limit on device 3: 25%");
}

TEST(DescribeTest, DisabledControl) {
  const ConfigResult result = Parse({{"CUDA_DISABLE_CONTROL", "true"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  EXPECT_EQ(result.config.Describe(),
            "control: disabled by CUDA_DISABLE_CONTROL (calls pass through, no limits)\nlog level: error\n");
}

// ---- bounded deterministic fuzz -----------------------------------------------------------------

std::string RandomText(std::mt19937_64& rng) {
  static const std::string kAlphabet = "0123456789012345.-  \tkKmMgGtTpPeEiIbB%,xX+";
  std::uniform_int_distribution<int> length(0, 14), byte(1, 255), percent(0, 99);
  std::string s;
  const int n = length(rng);
  const bool structured = percent(rng) < 50;  // digits, optional fraction, optional unit
  if (structured) {
    s = std::to_string(rng() >> (rng() % 64));
    if (percent(rng) < 30) s += "." + std::to_string(rng() % 100000);
    static const char* const kUnits[] = {"", "k", "M", "g", "GiB", "MiB", "KB", "T", "e", "B", " GiB", "x"};
    s += kUnits[rng() % (sizeof(kUnits) / sizeof(kUnits[0]))];
    if (percent(rng) < 10) s.insert(rng() % (s.size() + 1), 1, kAlphabet[rng() % kAlphabet.size()]);
    return s;
  }
  for (int i = 0; i < n; ++i) {
    s += percent(rng) < 85 ? kAlphabet[rng() % kAlphabet.size()] : static_cast<char>(byte(rng));
  }
  return s;
}

// Independent check of an accepted size with long double arithmetic.
void CheckAcceptedSize(const std::string& text, uint64_t value) {
  std::string trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
  size_t start = 0;
  while (start < trimmed.size() && std::isspace(static_cast<unsigned char>(trimmed[start]))) ++start;
  trimmed = trimmed.substr(start);
  ASSERT_FALSE(trimmed.empty());
  ASSERT_TRUE(std::isdigit(static_cast<unsigned char>(trimmed[0]))) << text;
  if (trimmed.find_first_not_of("0123456789") == std::string::npos) {
    EXPECT_EQ(value, std::stoull(trimmed)) << text;  // only digits: exactly the integer
    return;
  }
  char* end = nullptr;
  const long double number = std::strtold(trimmed.c_str(), &end);
  std::string unit(end);
  while (!unit.empty() && (unit[0] == ' ' || unit[0] == '\t')) unit.erase(0, 1);
  const std::string prefixes = "kmgtpe";
  const size_t index = unit.empty() ? std::string::npos : prefixes.find(std::tolower(unit[0]));
  const long double multiplier = index == std::string::npos ? 1.0L : std::ldexp(1.0L, 10 * (static_cast<int>(index) + 1));
  const long double expected = std::floor(number * multiplier);
  EXPECT_LE(std::fabs(expected - static_cast<long double>(value)), 2.0L + expected * 1e-15L) << text;
}

TEST(ConfigFuzzTest, RandomSizesAndValues) {
  static const char* const kNames[] = {
      "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_MEM_LIMIT_1", "WRAPPER_MAX_MEMORY",
      "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_LIMIT_2", "CUDA_CORE_SOFT_LIMIT", "CUDA_OVERSUBSCRIBE",
      "CUDA_OVERSUBSCRIBE_HOST_LIMIT", "GPU_CORE_UTILIZATION_POLICY", "CUDA_TASK_PRIORITY", "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL",
      "CUDA_DISABLE_CONTROL", "GPU_DEVICES_UUID", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_DEVICE_SM_LIMIT_17"};
  std::mt19937_64 rng(20240611);
  int accepted_sizes = 0, accepted_configs = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::string text = RandomText(rng);
    std::string why;
    if (const std::optional<uint64_t> size = ParseSize(text, &why)) {
      ++accepted_sizes;
      CheckAcceptedSize(text, *size);
      const std::optional<uint64_t> back = ParseSize(FormatSize(*size));
      ASSERT_TRUE(back && *back <= *size) << text;
    } else {
      ASSERT_EQ(why.rfind(kSizeExpected, 0), 0u) << text;
    }
    if (const std::optional<int> percent = ParsePercent(text)) {
      ASSERT_TRUE(*percent >= 0 && *percent <= 100) << text;
      ASSERT_EQ(ParsePercent(std::to_string(*percent)), percent);
    }
    const std::string name = kNames[rng() % (sizeof(kNames) / sizeof(kNames[0]))];
    const std::string entry = name + "=" + text;
    const char* envp[] = {entry.c_str(), nullptr};
    const ConfigResult result = ParseEnviron(envp);
    if (result.ok()) {
      ++accepted_configs;
      continue;
    }
    for (const ConfigError& error : result.errors) {
      ASSERT_EQ(error.variable, name);
      const std::string message = error.Message();
      ASSERT_EQ(message.rfind("vgpu: invalid " + name + "=\"", 0), 0u) << message;
      ASSERT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  EXPECT_GT(accepted_sizes, 20000);  // the generator reaches the accepting paths
  EXPECT_GT(accepted_configs, 10000);
}

}  // namespace
}  // namespace vgpu
