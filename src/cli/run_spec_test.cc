#include "cli/run_spec.h"

#include <gtest/gtest.h>

#include "common/config.h"
#include "ledger/limits_from_config.h"

namespace vgpu::cli {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

// Parses and builds `vgpu run <argv>`; argv should include "--" and a command.
RunSpecResult Build(std::vector<std::string> argv) {
  const ParseResult parsed = ParseArgs(argv, RunOptions(), OperandMode::kStopAtFirstOperand);
  EXPECT_TRUE(parsed.ok()) << parsed.error;
  return BuildRunSpec(parsed.args);
}

RunSpec BuildOk(std::vector<std::string> argv) {
  argv.insert(argv.end(), {"--", "cmd"});
  RunSpecResult result = Build(argv);
  EXPECT_TRUE(result.ok()) << result.error;
  return result.spec;
}

// Builds with one option and expects an error that names the option and the value.
std::string BuildError(const std::string& option, const std::string& value) {
  const RunSpecResult result = Build({option, value, "--", "cmd"});
  EXPECT_FALSE(result.ok()) << option << " " << value;
  EXPECT_NE(result.error.find(option), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("\"" + value + "\""), std::string::npos) << result.error;
  return result.error;
}

TEST(RunSpecTest, MemoryValidValues) {
  struct Case {
    std::string text;
    uint64_t bytes;
  };
  for (const Case& c : {Case{"4GiB", 4 * kGiB}, Case{"512m", 512 * kMiB}, Case{"1.5g", 3 * kGiB / 2},
                        Case{"1073741824", kGiB}, Case{"1MiB", kMiB}, Case{"2 GiB", 2 * kGiB}}) {
    const RunSpec spec = BuildOk({"--memory", c.text});
    EXPECT_EQ(spec.memory.all, c.bytes) << c.text;
    EXPECT_TRUE(spec.memory.device.empty());
  }
}

TEST(RunSpecTest, MemoryInvalidValues) {
  for (const std::string value : {"12x", "", "-1g", "1e9", "1.5", "abc", "99999999999999999999g"}) {
    BuildError("--memory", value);
  }
}

TEST(RunSpecTest, MemoryBelowOneMiBIsRejectedWithAHint) {
  EXPECT_NE(BuildError("--memory", "0").find("below the 1 MiB minimum"), std::string::npos);
  EXPECT_NE(BuildError("--memory", "512").find("did you mean 512MiB?"), std::string::npos);
  EXPECT_EQ(BuildError("--memory", "512k").find("did you mean"), std::string::npos);
}

TEST(RunSpecTest, MemoryPerDevice) {
  const RunSpec spec = BuildOk({"--memory", "0=4GiB,1=2GiB"});
  EXPECT_FALSE(spec.memory.all.has_value());
  EXPECT_EQ(spec.memory.device, (std::map<int, uint64_t>{{0, 4 * kGiB}, {1, 2 * kGiB}}));

  const RunSpec mixed = BuildOk({"--memory", "2GiB,1=8GiB"});
  EXPECT_EQ(mixed.memory.all, 2 * kGiB);
  EXPECT_EQ(mixed.memory.device, (std::map<int, uint64_t>{{1, 8 * kGiB}}));

  const RunSpec last = BuildOk({"--memory", "15=1g"});
  EXPECT_EQ(last.memory.device.at(kMaxDevices - 1), kGiB);
}

TEST(RunSpecTest, MemoryPerDeviceInvalid) {
  for (const std::string value : {"0=", "=4GiB", "x=1g", "16=1g", "-1=1g", "0=1g,0=2g", "1g,2g", "1g,",
                                  ",1g", "0=12x", "0=1g,,1=1g", "00000000001=1g"}) {
    BuildError("--memory", value);
  }
  EXPECT_NE(BuildError("--memory", "0=1g,0=2g").find("device 0 is given twice"), std::string::npos);
  EXPECT_NE(BuildError("--memory", "16=1g").find("not an index from 0 to 15"), std::string::npos);
}

TEST(RunSpecTest, RepeatedOptionsMergeAndTheLaterValueWins) {
  const RunSpec spec = BuildOk({"--memory", "0=1g", "--memory", "1=2g,0=3g", "--memory", "4g", "--memory", "5g"});
  EXPECT_EQ(spec.memory.all, 5 * kGiB);
  EXPECT_EQ(spec.memory.device, (std::map<int, uint64_t>{{0, 3 * kGiB}, {1, 2 * kGiB}}));
}

TEST(RunSpecTest, ComputeValidValues) {
  EXPECT_EQ(BuildOk({"--compute", "30"}).compute.all, 30);
  EXPECT_EQ(BuildOk({"--compute", "30%"}).compute.all, 30);
  EXPECT_EQ(BuildOk({"--compute", "1"}).compute.all, 1);
  EXPECT_EQ(BuildOk({"--compute", "100"}).compute.all, 100);
  EXPECT_EQ(BuildOk({"--compute", "0=30,1=60"}).compute.device, (std::map<int, int>{{0, 30}, {1, 60}}));
}

TEST(RunSpecTest, ComputeInvalidValues) {
  for (const std::string value : {"0", "101", "abc", "30.5", "-5", "", "0=0", "0=101", "1=", "30,40"}) {
    BuildError("--compute", value);
  }
}

TEST(RunSpecTest, SoftCompute) {
  const RunSpec spec = BuildOk({"--compute", "30", "--soft-compute", "80"});
  EXPECT_EQ(spec.soft_compute.all, 80);
  EXPECT_EQ(BuildOk({"--compute", "30", "--soft-compute", "30"}).soft_compute.all, 30);
  EXPECT_EQ(BuildOk({"--compute", "0=30,1=60", "--soft-compute", "1=70"}).soft_compute.device,
            (std::map<int, int>{{1, 70}}));
  for (const std::string value : {"0", "101", "x"}) {
    const RunSpecResult r = Build({"--compute", "30", "--soft-compute", value, "--", "cmd"});
    EXPECT_FALSE(r.ok()) << value;
    EXPECT_NE(r.error.find("--soft-compute value \"" + value + "\""), std::string::npos) << r.error;
  }
}

TEST(RunSpecTest, SoftComputeNeedsComputeAndMustNotBeBelowIt) {
  RunSpecResult r = Build({"--soft-compute", "50", "--", "cmd"});
  EXPECT_NE(r.error.find("--soft-compute needs --compute"), std::string::npos) << r.error;
  r = Build({"--compute", "60", "--soft-compute", "50", "--", "cmd"});
  EXPECT_NE(r.error.find("--soft-compute 50 is below --compute 60"), std::string::npos) << r.error;
  // Per device: device 1's hard limit is 60, the soft limit for all devices is 50.
  r = Build({"--compute", "30,1=60", "--soft-compute", "50", "--", "cmd"});
  EXPECT_NE(r.error.find("for device 1"), std::string::npos) << r.error;
  r = Build({"--compute", "30", "--soft-compute", "50,2=20", "--", "cmd"});
  EXPECT_NE(r.error.find("--soft-compute 20 is below --compute 30 for device 2"), std::string::npos) << r.error;
}

TEST(RunSpecTest, Priority) {
  EXPECT_EQ(BuildOk({"--priority", "0"}).priority, 0);
  EXPECT_EQ(BuildOk({"--priority", "7"}).priority, 7);
  EXPECT_EQ(BuildOk({"--priority", std::to_string(kMaxTaskPriority)}).priority, kMaxTaskPriority);
  EXPECT_FALSE(BuildOk({}).priority.has_value());
  for (const std::string& value : std::vector<std::string>{"-1", std::to_string(kMaxTaskPriority + 1), "x", "", "1.5", "+1", " 1"}) {
    BuildError("--priority", value);
  }
}

TEST(RunSpecTest, Devices) {
  EXPECT_EQ(BuildOk({"--devices", "0,1"}).devices, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(BuildOk({"--devices", "3"}).devices, (std::vector<std::string>{"3"}));
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  EXPECT_EQ(BuildOk({"--devices", uuid + ",1"}).devices, (std::vector<std::string>{uuid, "1"}));
  EXPECT_EQ(BuildOk({"--devices", "MIG-abc"}).devices, (std::vector<std::string>{"MIG-abc"}));
  for (const std::string& value : std::vector<std::string>{"", "0,0", "0,,1", "a", "-1", "0 ,1", "GPU-a b", uuid + "," + uuid,
                                  "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"}) {
    BuildError("--devices", value);
  }
}

TEST(RunSpecTest, PerDeviceIndexMustBeVisibleWithDevices) {
  RunSpecResult r = Build({"--devices", "2,3", "--memory", "2=1g", "--", "cmd"});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("--memory sets a limit for device 2, but --devices makes only 2 visible"),
            std::string::npos)
      << r.error;
  r = Build({"--memory", "1=1g", "--compute", "2=50", "--devices", "7,4", "--", "cmd"});
  EXPECT_NE(r.error.find("--compute sets a limit for device 2"), std::string::npos) << r.error;
  // Indices number the listed devices, so 1 is valid with two devices.
  EXPECT_TRUE(Build({"--devices", "5,6", "--memory", "1=1g", "--", "cmd"}).ok());
  // Without --devices any index 0..15 is accepted.
  EXPECT_TRUE(Build({"--memory", "9=1g", "--", "cmd"}).ok());
}

TEST(RunSpecTest, FlagsPathsAndCommand) {
  const RunSpec spec = BuildOk({"--oversubscribe", "-v", "--ledger", "/x/l", "--library", "/y/libvgpu.so"});
  EXPECT_TRUE(spec.oversubscribe);
  EXPECT_TRUE(spec.verbose);
  EXPECT_EQ(spec.ledger_path, "/x/l");
  EXPECT_EQ(spec.library_path, "/y/libvgpu.so");
  EXPECT_EQ(spec.command, (std::vector<std::string>{"cmd"}));
  const RunSpec plain = BuildOk({});
  EXPECT_FALSE(plain.oversubscribe);
  EXPECT_FALSE(plain.verbose);
  EXPECT_TRUE(plain.memory.empty());
  EXPECT_TRUE(plain.compute.empty());
  BuildError("--ledger", "");
  BuildError("--library", "");
}

TEST(RunSpecTest, HostLimitImpliesOversubscriptionAndReachesLedgerAndEnvironment) {
  const RunSpec spec = BuildOk({"--memory", "1GiB,1=2GiB", "--oversubscribe-host-limit", "4GiB"});
  EXPECT_TRUE(spec.oversubscribe);
  EXPECT_EQ(spec.oversubscribe_host_limit, 4 * kGiB);
  const ledger::LimitSet limits = RunLimits(spec);
  EXPECT_EQ(limits.default_host_limit, 4 * kGiB);
  ASSERT_EQ(limits.devices.size(), 1u);
  EXPECT_EQ(limits.devices[0].host_limit, 4 * kGiB);
  const RunEnvironment job = BuildRunEnvironment(spec, {{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "1g"}}, "/opt/vgpu/libvgpu.so", "/l");
  EXPECT_EQ(job.env.at("CUDA_OVERSUBSCRIBE"), "true");
  EXPECT_EQ(job.env.at("CUDA_OVERSUBSCRIBE_HOST_LIMIT"), std::to_string(4 * kGiB));
  // Without a host limit each device spills as much as its memory limit; without
  // oversubscription nothing.
  const ledger::LimitSet plain = RunLimits(BuildOk({"--memory", "1GiB,1=2GiB", "--oversubscribe"}));
  EXPECT_EQ(plain.default_host_limit, kGiB);
  ASSERT_EQ(plain.devices.size(), 1u);
  EXPECT_EQ(plain.devices[0].host_limit, 2 * kGiB);
  EXPECT_EQ(RunLimits(BuildOk({"--memory", "1GiB"})).default_host_limit, 0u);
  BuildError("--oversubscribe-host-limit", "0");
  BuildError("--oversubscribe-host-limit", "lots");
}

TEST(RunSpecTest, CommandIsRequiredUnlessHelp) {
  RunSpecResult r = Build({"--memory", "1g"});
  EXPECT_NE(r.error.find("no command given"), std::string::npos) << r.error;
  r = Build({"--memory", "1g", "--"});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(Build({"--help"}).ok());
  EXPECT_EQ(Build({"--memory", "1g", "python", "-v", "x.py"}).spec.command,
            (std::vector<std::string>{"python", "-v", "x.py"}));
}

// --- Environment ------------------------------------------------------------------------------

TEST(RunSpecTest, InheritedLimitVariables) {
  for (const char* name :
       {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_15",
        "CUDA_DEVICE_MEMORY_LIMIT_99", "CUDA_DEVICE_MEMORY_LIMIT_x", "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_SM_LIMIT_3", "CUDA_DEVICE_CORE_LIMIT", "CUDA_DEVICE_FOO_LIMIT_2", "CUDA_MEM_LIMIT",
        "CUDA_MEM_LIMIT_0", "CUDA_CORE_LIMIT", "CUDA_CORE_LIMIT_1", "CUDA_CORE_SOFT_LIMIT",
        "CUDA_CORE_SOFT_LIMIT_2", "WRAPPER_MAX_MEMORY", "CUDA_OVERSUBSCRIBE", "CUDA_MEMORY_OVERSUBSCRIBE",
        "CUDA_TASK_PRIORITY", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "GPU_CORE_UTILIZATION_POLICY",
        "CUDA_DISABLE_CONTROL"}) {
    EXPECT_TRUE(IsInheritedLimitVariable(name)) << name;
  }
  for (const char* name :
       {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_LIMIT", "LD_PRELOAD", "LIBCUDA_LOG_LEVEL",
        "LOGGER_LEVEL", "GPU_DEVICES_UUID", "PATH", "CUDA_MEM_LIMITS", "CUDA_DEVICE_MEMORY_LIMIT_",
        "MY_CUDA_MEM_LIMIT", "CUDA_CACHE_PATH", "CUDA_DEVICE_MAX_CONNECTIONS"}) {
    EXPECT_FALSE(IsInheritedLimitVariable(name)) << name;
  }
}

TEST(RunSpecTest, PrependPreload) {
  EXPECT_EQ(PrependPreload("", "/l/libvgpu.so"), "/l/libvgpu.so");
  EXPECT_EQ(PrependPreload("/a.so", "/l/libvgpu.so"), "/l/libvgpu.so:/a.so");
  EXPECT_EQ(PrependPreload("/a.so /b.so:/c.so", "/l/libvgpu.so"), "/l/libvgpu.so:/a.so:/b.so:/c.so");
  // No duplicates: the same path, and another copy of libvgpu.so, are dropped.
  EXPECT_EQ(PrependPreload("/a.so:/l/libvgpu.so", "/l/libvgpu.so"), "/l/libvgpu.so:/a.so");
  EXPECT_EQ(PrependPreload("/l/libvgpu.so", "/l/libvgpu.so"), "/l/libvgpu.so");
  EXPECT_EQ(PrependPreload("/old/libvgpu.so:/a.so", "/l/libvgpu.so"), "/l/libvgpu.so:/a.so");
  EXPECT_EQ(PrependPreload("::/a.so  ", "/l/libvgpu.so"), "/l/libvgpu.so:/a.so");
  // Only the exact file name libvgpu.so counts as a copy.
  EXPECT_EQ(PrependPreload("/x/libvgpu.so.old", "/l/libvgpu.so"), "/l/libvgpu.so:/x/libvgpu.so.old");
  // A dummy library of another name (tests) is preloaded once, not twice.
  EXPECT_EQ(PrependPreload("/t/dummy.so", "/t/dummy.so"), "/t/dummy.so");
}

TEST(RunSpecTest, PreloadProblem) {
  EXPECT_EQ(PreloadProblem("/opt/vgpu/libvgpu.so"), "");
  EXPECT_NE(PreloadProblem("libvgpu.so"), "");
  EXPECT_NE(PreloadProblem(""), "");
  EXPECT_NE(PreloadProblem("/a:b/libvgpu.so"), "");
  EXPECT_NE(PreloadProblem("/my libs/libvgpu.so"), "");
}

RunEnvironment Environment(std::vector<std::string> argv, const EnvMap& inherited) {
  return BuildRunEnvironment(BuildOk(std::move(argv)), inherited, "/opt/vgpu/libvgpu.so", "/run/r/ledger");
}

TEST(RunSpecTest, EnvironmentStripsInheritedDialectsAndSetsCanonicalNames) {
  const EnvMap inherited = {
      {"PATH", "/usr/bin"},
      {"CUDA_MEM_LIMIT_0", "5g"},
      {"CUDA_CORE_LIMIT", "90"},
      {"WRAPPER_MAX_MEMORY", "1"},
      {"CUDA_MEMORY_OVERSUBSCRIBE", "true"},
      {"CUDA_DEVICE_MEMORY_LIMIT_3", "9g"},
      {"CUDA_DISABLE_CONTROL", "true"},
      {"GPU_CORE_UTILIZATION_POLICY", "disable"},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/old/ledger"},
      {"LD_PRELOAD", "/a.so"},
      {"CUDA_VISIBLE_DEVICES", "2,3"},
      {"GPU_DEVICES_UUID", "GPU-a,GPU-b"},
  };
  const RunEnvironment job = Environment({"--memory", "1GiB,1=2GiB", "--compute", "30,1=60", "--soft-compute",
                                          "70", "--priority", "0", "--oversubscribe"},
                                         inherited);
  const EnvMap expected = {
      {"PATH", "/usr/bin"},
      {"LD_PRELOAD", "/opt/vgpu/libvgpu.so:/a.so"},
      {"CUDA_VISIBLE_DEVICES", "2,3"},          // inherited: no --devices
      {"GPU_DEVICES_UUID", "GPU-a,GPU-b"},      // still matches CUDA_VISIBLE_DEVICES
      {"CUDA_DEVICE_MEMORY_LIMIT", "1073741824"},
      {"CUDA_DEVICE_MEMORY_LIMIT_1", "2147483648"},
      {"CUDA_DEVICE_SM_LIMIT", "30"},
      {"CUDA_DEVICE_SM_LIMIT_1", "60"},
      {"CUDA_CORE_SOFT_LIMIT", "70"},
      {"CUDA_TASK_PRIORITY", "0"},
      {"CUDA_OVERSUBSCRIBE", "true"},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/run/r/ledger"},
  };
  EXPECT_EQ(job.env, expected);
}

TEST(RunSpecTest, EnvironmentWithDevicesAndVerbose) {
  const RunEnvironment job =
      Environment({"--devices", "1,GPU-x", "-v"}, {{"CUDA_VISIBLE_DEVICES", "0"}, {"GPU_DEVICES_UUID", "GPU-y"}});
  EXPECT_EQ(job.env.at("CUDA_VISIBLE_DEVICES"), "1,GPU-x");
  EXPECT_EQ(job.env.count("GPU_DEVICES_UUID"), 0u);
  EXPECT_EQ(job.env.at("LIBCUDA_LOG_LEVEL"), "4");
  EXPECT_EQ(job.env.count("CUDA_DEVICE_MEMORY_LIMIT"), 0u);
  EXPECT_EQ(job.env.count("CUDA_DEVICE_SM_LIMIT"), 0u);
  EXPECT_EQ(job.env.count("CUDA_TASK_PRIORITY"), 0u);
  EXPECT_EQ(job.env.count("CUDA_OVERSUBSCRIBE"), 0u);
}

TEST(RunSpecTest, EnvironmentKeepsAnInheritedLogLevelWithoutVerbose) {
  const RunEnvironment job = Environment({}, {{"LIBCUDA_LOG_LEVEL", "2"}});
  EXPECT_EQ(job.env.at("LIBCUDA_LOG_LEVEL"), "2");
}

TEST(RunSpecTest, ChangesListRemovalsThenAssignments) {
  const RunEnvironment job = Environment({"--compute", "30"}, {{"CUDA_CORE_LIMIT", "90"}, {"HOME", "/h"}});
  ASSERT_EQ(job.changes.size(), 4u);
  EXPECT_EQ(job.changes[0].name, "CUDA_CORE_LIMIT");
  EXPECT_FALSE(job.changes[0].value.has_value());
  EXPECT_EQ(job.changes[1].name, "LD_PRELOAD");
  EXPECT_EQ(job.changes[1].value, "/opt/vgpu/libvgpu.so");
  EXPECT_EQ(job.changes[2].name, "CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(job.changes[3].name, "CUDA_DEVICE_MEMORY_SHARED_CACHE");
}

// What vgpu run hands the job must be what the library reads: parse the built environment with
// the library's own parser and compare field by field.
TEST(RunSpecTest, LibraryParserReadsTheBuiltEnvironmentBack) {
  const RunEnvironment job =
      Environment({"--memory", "1.5GiB,1=2GiB", "--compute", "30,1=60", "--soft-compute", "70,1=90",
                   "--priority", "0", "--oversubscribe", "--devices", "0,1", "-v"},
                  {{"CUDA_MEM_LIMIT_0", "5g"}, {"CUDA_CORE_LIMIT", "99"}, {"CUDA_DISABLE_CONTROL", "1"}});
  std::vector<std::string> entries;
  for (const auto& [name, value] : job.env) entries.push_back(name + "=" + value);
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  const ConfigResult parsed = ParseEnviron(envp.data());
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].Message();
  const Config& config = parsed.config;
  EXPECT_FALSE(config.disable_control);
  EXPECT_EQ(config.MemoryLimit(0), 3 * kGiB / 2);
  EXPECT_EQ(config.MemoryLimit(1), 2 * kGiB);
  EXPECT_EQ(config.SmLimit(0), 30);
  EXPECT_EQ(config.SmLimit(1), 60);
  EXPECT_EQ(config.SmSoftLimit(0), 70);
  EXPECT_EQ(config.SmSoftLimit(1), 90);
  EXPECT_EQ(config.task_priority, 0);
  EXPECT_TRUE(config.oversubscribe);
  EXPECT_EQ(config.shared_cache_path, "/run/r/ledger");
  EXPECT_EQ(config.log_level, LogLevel::kDebug);
}

// What vgpu run writes into the ledger must equal what the library derives from the job's
// environment, or every job process would report a disagreement.
TEST(RunSpecTest, RunLimitsMatchWhatTheLibraryDerivesFromTheEnvironment) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"--memory", "4GiB"},
      {"--memory", "2GiB,1=8GiB", "--compute", "30", "--soft-compute", "1=80"},
      {"--compute", "0=100,1=40", "--priority", "0"},
      {"--devices", "0,1", "--memory", "0=1GiB", "--compute", "100"},
      {"--memory", "3=1GiB", "--soft-compute", "50", "--compute", "20,3=50", "--priority", "7"},
      {"--memory", "1GiB,2=2GiB", "--oversubscribe"},
      {"--memory", "1GiB,2=2GiB", "--oversubscribe-host-limit", "6GiB"},
      {"--memory", "1=2GiB", "--oversubscribe", "--oversubscribe-host-limit", "3GiB"},
  };
  for (const std::vector<std::string>& argv : cases) {
    const RunSpec spec = BuildOk(argv);
    const ledger::LimitSet written = RunLimits(spec);
    EXPECT_EQ(written.authority, ledger::Authority::kVgpuRun);
    EXPECT_EQ(ledger::ValidateLimitSet(written), "");
    const RunEnvironment job = BuildRunEnvironment(spec, {}, "/opt/vgpu/libvgpu.so", "/run/ledger");
    std::vector<std::string> entries;
    for (const auto& [name, value] : job.env) entries.push_back(name + "=" + value);
    std::vector<const char*> envp;
    for (const std::string& entry : entries) envp.push_back(entry.c_str());
    envp.push_back(nullptr);
    const ConfigResult parsed = ParseEnviron(envp.data());
    ASSERT_TRUE(parsed.ok());
    const ledger::LimitSet derived = ledger::LimitSetFromConfig(parsed.config, ledger::Authority::kLibrary);
    EXPECT_EQ(ledger::CompareLimits(written, derived), "") << ::testing::PrintToString(argv);
  }
}

TEST(RunSpecTest, RunLimitsListEachConfiguredOrdinalWithItsEffectiveValues) {
  const ledger::LimitSet limits =
      RunLimits(BuildOk({"--memory", "2GiB,1=8GiB", "--compute", "30,2=100", "--soft-compute", "1=80", "--priority", "4"}));
  EXPECT_EQ(limits.default_memory_limit, 2 * kGiB);
  EXPECT_EQ(limits.default_sm_limit, 30);
  EXPECT_EQ(limits.default_sm_soft_limit, 0);
  EXPECT_EQ(limits.task_priority, 4);
  ASSERT_EQ(limits.devices.size(), 2u);
  EXPECT_EQ(limits.devices[0].ordinal, 1);
  EXPECT_EQ(limits.devices[0].memory_limit, 8 * kGiB);
  EXPECT_EQ(limits.devices[0].sm_limit, 30);
  EXPECT_EQ(limits.devices[0].sm_soft_limit, 80);
  EXPECT_TRUE(limits.devices[0].uuid.empty());
  EXPECT_EQ(limits.devices[1].ordinal, 2);
  EXPECT_EQ(limits.devices[1].memory_limit, 2 * kGiB);
  EXPECT_EQ(limits.devices[1].sm_limit, 0);  // 100 = unlimited
  EXPECT_EQ(RunLimits(BuildOk({})).task_priority, 1);  // the library's default
}

}  // namespace
}  // namespace vgpu::cli
