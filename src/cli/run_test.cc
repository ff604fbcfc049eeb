#include "cli/run.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

namespace vgpu::cli {
namespace {

namespace fs = std::filesystem;

EnvMap BaseEnv() { return {{"PATH", "/usr/bin:/bin"}}; }

// SIGTERM is blocked while a job runs (it is forwarded to the job), so a hung test could not be
// stopped by a TERM-based timeout. SIGALRM is not blocked: it ends a hung test binary.
class RunTest : public ::testing::Test {
 protected:
  void SetUp() override { alarm(120); }
  void TearDown() override { alarm(0); }
};

int RunJob(const std::vector<std::string>& argv, const EnvMap& env = BaseEnv(), std::string* err_text = nullptr) {
  std::ostringstream err;
  ScopedSignalBlock block;
  const int code = RunAndWait(argv, env, block, err);
  if (err_text != nullptr) *err_text = err.str();
  return code;
}

TEST_F(RunTest, ExitCodeFromWaitStatus) {
  EXPECT_EQ(ExitCodeFromWaitStatus(0), 0);
  EXPECT_EQ(ExitCodeFromWaitStatus(7 << 8), 7);
  EXPECT_EQ(ExitCodeFromWaitStatus(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(ExitCodeFromWaitStatus(SIGKILL | 0x80), 128 + SIGKILL);  // with core-dump bit
}

TEST_F(RunTest, ReturnsTheJobsExitStatus) {
  EXPECT_EQ(RunJob({"sh", "-c", "exit 7"}), 7);
  EXPECT_EQ(RunJob({"true"}), 0);
  EXPECT_EQ(RunJob({"sh", "-c", "exit 255"}), 255);
}

TEST_F(RunTest, JobKilledBySignalGives128PlusSignal) {
  EXPECT_EQ(RunJob({"sh", "-c", "kill -KILL $$"}), 128 + SIGKILL);
  EXPECT_EQ(RunJob({"sh", "-c", "kill -TERM $$"}), 128 + SIGTERM);
}

TEST_F(RunTest, JobGetsExactlyTheGivenEnvironment) {
  EnvMap env = BaseEnv();
  env["VGPU_TEST_VALUE"] = "a b=c";
  setenv("VGPU_TEST_PARENT_ONLY", "1", 1);
  EXPECT_EQ(RunJob({"sh", "-c", "test \"$VGPU_TEST_VALUE\" = 'a b=c' && test -z \"${VGPU_TEST_PARENT_ONLY+x}\""}, env),
            0);
  unsetenv("VGPU_TEST_PARENT_ONLY");
}

TEST_F(RunTest, CommandIsSearchedInPath) {
  EnvMap env = BaseEnv();
  EXPECT_EQ(RunJob({"env", "true"}, env), 0);
}

TEST_F(RunTest, ExecFailures) {
  // The child prints to fd 2 directly; the exit codes are what the caller can check.
  EXPECT_EQ(RunJob({"/no/such/command"}), kExitNotFound);
  EXPECT_EQ(RunJob({"no-such-command-vgpu-test"}), kExitNotFound);
  char path[] = "/tmp/vgpu-run-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  chmod(path, 0644);
  EXPECT_EQ(RunJob({path}), kExitCannotExecute);  // no x bit: EACCES, even for root
  unlink(path);
  EXPECT_EQ(RunJob({"/tmp"}), kExitCannotExecute);  // a directory
}

// A signal sent to vgpu (here: to this process, by another thread) reaches the job: the job
// traps SIGTERM and exits 3, which only happens if it received the signal.
TEST_F(RunTest, ForwardsSignalsSentToVgpu) {
  const std::string ready = fs::temp_directory_path() / ("vgpu-run-test-ready-" + std::to_string(getpid()));
  fs::remove(ready);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    std::ostringstream err;
    ScopedSignalBlock block;  // before the thread starts: it inherits the blocked mask
    std::thread sender([&] {
      for (int i = 0; i < 400 && !fs::exists(ready); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      kill(getpid(), sig);
    });
    const std::string script = "trap 'exit 3' " + std::to_string(sig) + "; : > " + ready +
                               "; i=0; while [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done; exit 9";
    const int code = RunAndWait({"sh", "-c", script}, BaseEnv(), block, err);
    sender.join();
    fs::remove(ready);
    EXPECT_EQ(code, 3) << "signal " << sig;
  }
}

TEST_F(RunTest, UnforwardableJobDeathIsReportedWithItsSignal) {
  const std::string ready = fs::temp_directory_path() / ("vgpu-run-test-ready2-" + std::to_string(getpid()));
  fs::remove(ready);
  std::ostringstream err;
  ScopedSignalBlock block;
  std::thread sender([&] {
    for (int i = 0; i < 400 && !fs::exists(ready); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    kill(getpid(), SIGTERM);
  });
  const int code = RunAndWait({"sh", "-c", ": > " + ready + "; exec sleep 10"}, BaseEnv(), block, err);
  sender.join();
  fs::remove(ready);
  EXPECT_EQ(code, 128 + SIGTERM);
}

// An inherited SIG_IGN for SIGCHLD would let the kernel reap the job before vgpu sees its status.
TEST_F(RunTest, WorksWhenSigchldIsIgnoredAndRestoresIt) {
  alarm(20);  // the failure mode is a hang: no SIGCHLD ever arrives
  struct sigaction ignore {}, old {}, after {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &old);
  EXPECT_EQ(RunJob({"sh", "-c", "exit 5"}), 5);
  sigaction(SIGCHLD, &old, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
}

TEST_F(RunTest, ScopedSignalBlockRestoresTheMaskAndDrainsPendingSignals) {
  sigset_t before, during, after;
  sigprocmask(SIG_SETMASK, nullptr, &before);
  ASSERT_EQ(sigismember(&before, SIGTERM), 0);
  {
    ScopedSignalBlock block;
    sigprocmask(SIG_SETMASK, nullptr, &during);
    EXPECT_EQ(sigismember(&during, SIGTERM), 1);
    EXPECT_EQ(sigismember(&during, SIGCHLD), 1);
    kill(getpid(), SIGTERM);  // pending; must be discarded, not delivered (it would kill the test)
  }
  sigprocmask(SIG_SETMASK, nullptr, &after);
  EXPECT_EQ(sigismember(&after, SIGTERM), 0);
  EXPECT_EQ(sigismember(&after, SIGCHLD), sigismember(&before, SIGCHLD));
}

TEST_F(RunTest, JobStartsWithTheCallersSignalMask) {
  // SigBlk in /proc/self/status of the job must not include SIGTERM (bit 15).
  EXPECT_EQ(RunJob({"sh", "-c", "m=$(grep SigBlk /proc/self/status | cut -f2); test $(( 0x$m & 0x4000 )) -eq 0"}), 0);
}

TEST_F(RunTest, CurrentEnvironmentSeesSetenv) {
  setenv("VGPU_TEST_CURRENT", "x=y", 1);
  const EnvMap env = CurrentEnvironment();
  unsetenv("VGPU_TEST_CURRENT");
  ASSERT_EQ(env.count("VGPU_TEST_CURRENT"), 1u);
  EXPECT_EQ(env.at("VGPU_TEST_CURRENT"), "x=y");
}

}  // namespace
}  // namespace vgpu::cli
