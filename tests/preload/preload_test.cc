// Preload integration tests: real programs run against the simulated driver (tests/simdriver),
// with and without libvgpu.so in LD_PRELOAD, and their results are compared.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdio>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "subprocess.h"

namespace vgpu::testing {
namespace {

using Env = std::map<std::string, std::string>;

std::string Program(const std::string& name) { return std::string(VGPU_TEST_PROGRAM_DIR) + "/" + name; }

// The environment of a run: only what the test sets, plus the simulated driver's directory.
Env BaseEnv() { return {{"LD_LIBRARY_PATH", VGPU_SIM_DIR}, {"PATH", "/usr/bin:/bin"}}; }

Env WithVgpu(Env env = BaseEnv()) {
  env["LD_PRELOAD"] = VGPU_LIBRARY_PATH;
  return env;
}

Env With(Env env, const Env& extra) {
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

// A private ledger for runs with limits, so that no test depends on (or leaves) a ledger at the
// default path /tmp/vgpu-<euid>/ledger, where a file from another build may live.
class PrivateLedger {
 public:
  PrivateLedger() {
    char pattern[] = "/tmp/vgpu-preload-test-XXXXXX";
    dir_ = mkdtemp(pattern) != nullptr ? pattern : "/tmp";
  }
  ~PrivateLedger() { std::filesystem::remove_all(dir_); }
  Env Variables() const { return {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_ + "/ledger"}}; }

 private:
  std::string dir_;
};

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") + "\n--- stdout\n" +
         r.out + "--- stderr\n" + r.err;
}

TEST(Preload, DriverApiProgramGivesTheSameResultsWithVgpu) {
  const RunResult native = RunProgram({Program("driver_api")}, BaseEnv());
  ASSERT_EQ(native.exit_code, 0) << Describe(native);
  const RunResult hooked = RunProgram({Program("driver_api")}, WithVgpu());
  ASSERT_EQ(hooked.exit_code, 0) << Describe(hooked);
  EXPECT_EQ(hooked.out, native.out);
  EXPECT_NE(native.out.find("done"), std::string::npos);
}

TEST(Preload, SilentByDefault) {
  const RunResult r = RunProgram({Program("driver_api")}, WithVgpu());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err, "");
}

TEST(Preload, VerboseLogShowsTheExportedSymbolLayerAndNeverTouchesStdout) {
  const RunResult quiet = RunProgram({Program("driver_api")}, WithVgpu());
  const RunResult r = RunProgram({Program("driver_api")}, With(WithVgpu(), {{"LIBCUDA_LOG_LEVEL", "4"}}));
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, quiet.out);
  EXPECT_NE(r.err.find("hook cuInit reached through exported symbol"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hook cuMemAlloc_v2 reached through exported symbol"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hook cuLaunchKernel reached through exported symbol"), std::string::npos) << r.err;
  EXPECT_EQ(CountOccurrences(r.err, "hook cuMemAlloc_v2 reached through exported symbol"), 1);
}

TEST(Preload, ProcAddressMapsEveryVersionedVariantToTheWrapperOfTheSameAbi) {
  const RunResult native = RunProgram({Program("proc_address"), "driver"}, BaseEnv());
  ASSERT_EQ(native.exit_code, 0) << Describe(native);
  const RunResult hooked = RunProgram({Program("proc_address"), "vgpu"}, WithVgpu());
  ASSERT_EQ(hooked.exit_code, 0) << Describe(hooked);
  EXPECT_EQ(hooked.out, native.out);
}

// What the CUDA 11.x, 12.x and 13.x runtimes ask cuGetProcAddress for (read from their
// libcudart_static.a, docs/interposition.md): each lands on the entry of the same ABI, and every
// allocation, launch, synchronisation and memory-query request on vgpu's wrapper.
TEST(Preload, EveryRuntimeRequestLandsOnTheEntryOfItsAbi) {
  const RunResult native = RunProgram({Program("runtime_requests"), "driver"}, BaseEnv());
  EXPECT_EQ(native.exit_code, 0) << Describe(native);
  const RunResult hooked = RunProgram({Program("runtime_requests"), "vgpu"}, WithVgpu());
  EXPECT_EQ(hooked.exit_code, 0) << Describe(hooked);
  EXPECT_NE(hooked.out.find(" 0 failures"), std::string::npos) << Describe(hooked);
}

TEST(Preload, VerboseLogShowsDlsymAndProcAddressLayers) {
  const RunResult r =
      RunProgram({Program("proc_address"), "vgpu"}, With(WithVgpu(), {{"LIBCUDA_LOG_LEVEL", "4"}}));
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.err.find("hook cuGetProcAddress_v2 reached through dlsym"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hook cuMemAlloc_v2 reached through cuGetProcAddress (\"cuMemAlloc\", cudaVersion 3020"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("hook cuLaunchKernel_ptsz reached through cuGetProcAddress"), std::string::npos) << r.err;
}

TEST(Preload, DlsymIsInterposedOnlyForDriverHandles) {
  const RunResult native = RunProgram({Program("dlsym_lookup"), "driver"}, BaseEnv());
  ASSERT_EQ(native.exit_code, 0) << Describe(native);
  const RunResult hooked = RunProgram({Program("dlsym_lookup"), "vgpu"}, WithVgpu());
  ASSERT_EQ(hooked.exit_code, 0) << Describe(hooked);
}

// Loaded by hand after start-up (dlopen), the library must fit in the static TLS surplus: its
// thread-locals are initial-exec. 16 KiB of them once made dlopen fail on the GPU machine.
TEST(Preload, LibraryCanBeLoadedWithDlopenAndKeepsItsTlsSmall) {
  const RunResult r = RunProgram({Program("dlopen_library"), VGPU_LIBRARY_PATH}, BaseEnv());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  long long tls = -1;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "tls %lld", &tls), 1) << Describe(r);
  EXPECT_LE(tls, 256) << "libvgpu.so's TLS block is " << tls << " bytes; keep large buffers out of thread_local";
}

// The dynamic linker refuses to preload a library that needs a newer glibc than the process has,
// and the container then runs without limits. libvgpu.so needs at most glibc 2.34 (the pthread
// symbols' version since glibc merged libpthread), whatever glibc it is built on: the static
// libstdc++ / libgcc's references to arc4random (2.36) and _dl_find_object (2.35) are served
// inside the library (src/interpose/glibc_compat.cc).
TEST(Preload, LibraryNeedsNoGlibcNewerThan234) {
  if (!std::filesystem::exists("/usr/bin/objdump")) GTEST_SKIP() << "no /usr/bin/objdump";
  const RunResult r = RunProgram({"/usr/bin/objdump", "-T", VGPU_LIBRARY_PATH}, BaseEnv());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int newest_minor = 0;
  std::string newest_symbol;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("(GLIBC_2.");
    if (at == std::string::npos) continue;
    const int minor = std::atoi(line.c_str() + at + 9);
    if (minor > newest_minor) {
      newest_minor = minor;
      newest_symbol = line.substr(line.rfind(' ') + 1);
    }
  }
  EXPECT_GT(newest_minor, 0) << "no GLIBC_2.x references found in\n" << r.out;
  EXPECT_LE(newest_minor, 34) << "libvgpu.so needs GLIBC_2." << newest_minor << " (for " << newest_symbol << ")";
}

TEST(Preload, DisableControlMakesTheLibraryAPurePassThrough) {
  const Env env = With(WithVgpu(), {{"CUDA_DISABLE_CONTROL", "true"}});
  const RunResult gpa = RunProgram({Program("proc_address"), "driver"}, env);
  EXPECT_EQ(gpa.exit_code, 0) << Describe(gpa);
  const RunResult lookup = RunProgram({Program("dlsym_lookup"), "driver"}, env);
  EXPECT_EQ(lookup.exit_code, 0) << Describe(lookup);
  // Even a malformed limit does not matter once control is disabled.
  const RunResult api =
      RunProgram({Program("driver_api")}, With(env, {{"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}));
  EXPECT_EQ(api.exit_code, 0) << Describe(api);
}

TEST(Preload, MalformedLimitRefusesCudaWithAMessageNamingTheVariable) {
  const RunResult r =
      RunProgram({Program("driver_api")}, With(WithVgpu(), {{"CUDA_DEVICE_MEMORY_LIMIT", "12x"}}));
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_NE(r.err.find("CUDA_DEVICE_MEMORY_LIMIT=\"12x\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuInit(0) returned 800"), std::string::npos) << r.err;  // NOT_PERMITTED
  EXPECT_EQ(r.out, "");
}

TEST(Preload, ContradictoryDialectsAreReportedWithBothNames) {
  const RunResult r = RunProgram(
      {Program("driver_api")},
      With(WithVgpu(), {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_CORE_LIMIT", "40"}}));
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.err.find("CUDA_DEVICE_SM_LIMIT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA_CORE_LIMIT"), std::string::npos) << r.err;
}

TEST(Preload, SameValueInTwoDialectsIsAccepted) {
  const PrivateLedger ledger;
  const RunResult r = RunProgram(
      {Program("driver_api")},
      With(With(WithVgpu(), ledger.Variables()), {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"WRAPPER_MAX_MEMORY", "1073741824"}}));
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err, "");
}

TEST(Preload, VerboseLevelPrintsTheEffectiveConfigurationOnce) {
  for (const Env& level : {Env{{"LIBCUDA_LOG_LEVEL", "3"}}, Env{{"LOGGER_LEVEL", "5"}}}) {
    const PrivateLedger ledger;
    const RunResult r = RunProgram({Program("driver_api")},
                                   With(With(With(WithVgpu(), level), ledger.Variables()),
                                        {{"CUDA_DEVICE_MEMORY_LIMIT", "2GiB"}}));
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(CountOccurrences(r.err, "effective configuration"), 1) << r.err;
    EXPECT_NE(r.err.find("2 GiB"), std::string::npos) << r.err;
  }
}

TEST(Preload, ConcurrentFirstCallsFromManyThreads) {
  for (int run = 0; run < 25; ++run) {
    const RunResult r = RunProgram({Program("first_call_race")}, WithVgpu(), 30);
    ASSERT_EQ(r.exit_code, 0) << "run " << run << ": " << Describe(r);
  }
}

TEST(Preload, ForkedChildrenWork) {
  const RunResult r = RunProgram({Program("fork_child")}, WithVgpu(), 90);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("fork_child ok"), std::string::npos);
}

}  // namespace
}  // namespace vgpu::testing
