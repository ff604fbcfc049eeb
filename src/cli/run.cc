#include "cli/run.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/driver.h"
#include "cli/library_path.h"
#include "cli/run_dir.h"
#include "common/config.h"

extern char** environ;

namespace vgpu::cli {
namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

bool ShouldForward(const siginfo_t& info, pid_t child) {
  if (info.si_code != SI_KERNEL) return true;  // sent by a process: only vgpu got it
  const pid_t child_group = getpgid(child);
  return child_group >= 0 && child_group != getpgrp();
}

// Runs in the forked child: only async-signal-safe work besides strerror/snprintf, which are
// safe here because vgpu is single-threaded.
[[noreturn]] void ExecChild(char* const* argv, char* const* envp, const ScopedSignalBlock& block) {
  sigaction(SIGCHLD, &block.previous_sigchld(), nullptr);
  sigprocmask(SIG_SETMASK, &block.previous_mask(), nullptr);
  execvpe(argv[0], argv, envp);
  const int err = errno;
  char message[512];
  const int n = snprintf(message, sizeof(message), "vgpu: cannot run %s: %s\n", argv[0], strerror(err));
  if (n > 0) {
    const ssize_t ignored = write(STDERR_FILENO, message, static_cast<size_t>(n) < sizeof(message) ? n : sizeof(message) - 1);
    (void)ignored;
  }
  _exit(err == ENOENT || err == ENOTDIR ? kExitNotFound : kExitCannotExecute);
}

void PrintChanges(const std::vector<EnvChange>& changes, std::ostream& err) {
  for (const EnvChange& change : changes) {
    if (change.value) {
      err << "vgpu: set   " << change.name << "=" << *change.value << "\n";
    } else {
      err << "vgpu: unset " << change.name << " (inherited limit variable)\n";
    }
  }
}

// The library's own parser must accept what vgpu hands the job; anything else is a vgpu bug or
// a bad inherited non-limit variable (e.g. LIBCUDA_LOG_LEVEL), reported before running.
std::string CheckWithLibraryParser(const EnvMap& env) {
  std::vector<std::string> entries;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  const ConfigResult parsed = ParseEnviron(envp.data());
  std::string errors;
  for (const ConfigError& error : parsed.errors) errors += (errors.empty() ? "" : "\n") + error.Message();
  return errors;
}

}  // namespace

ScopedSignalBlock::ScopedSignalBlock() {
  sigemptyset(&blocked_);
  for (const int sig : kForwarded) sigaddset(&blocked_, sig);
  sigaddset(&blocked_, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked_, &previous_mask_);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &previous_sigchld_);
}

ScopedSignalBlock::~ScopedSignalBlock() {
  const struct timespec zero {};
  while (sigtimedwait(&blocked_, nullptr, &zero) > 0) {
  }
  sigaction(SIGCHLD, &previous_sigchld_, nullptr);
  sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int ExitCodeFromWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
}

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = strchr(*entry, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*entry, static_cast<size_t>(eq - *entry)), std::string(eq + 1));  // keeps the first
  }
  return env;
}

int RunAndWait(const std::vector<std::string>& argv, const EnvMap& env,
               const ScopedSignalBlock& block, std::ostream& err) {
  // Everything the child needs is built before fork: the child only execs.
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> args;
  for (std::string& arg : argv_copy) args.push_back(arg.data());
  args.push_back(nullptr);

  err.flush();
  fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    err << "vgpu: cannot fork: " << strerror(errno) << "\n";
    return kExitFailure;
  }
  if (child == 0) ExecChild(args.data(), envp.data(), block);

  while (true) {
    siginfo_t info;
    const int sig = sigwaitinfo(&block.blocked(), &info);
    if (sig < 0) {
      if (errno == EINTR) continue;  // e.g. vgpu was stopped and continued
      int status = 0;  // cannot happen; still never leave the job unwaited
      return waitpid(child, &status, 0) == child ? ExitCodeFromWaitStatus(status) : kExitFailure;
    }
    if (sig == SIGCHLD) {
      int status = 0;
      const pid_t done = waitpid(child, &status, WNOHANG);
      if (done == child) return ExitCodeFromWaitStatus(status);
      if (done < 0 && errno == ECHILD) return kExitFailure;  // cannot happen: SIGCHLD is SIG_DFL
      continue;  // the job stopped or continued
    }
    if (ShouldForward(info, child)) kill(child, sig);
  }
}

namespace {

// The library to preload, absolute; empty after printing why there is none.
std::string ResolveLibrary(const RunSpec& spec, std::string* source, std::ostream& err) {
  const LibraryLookup library = FindLibrary(LibrarySearchFromProcess(spec.library_path), IsRegularFile);
  if (!library.ok()) {
    err << "vgpu run: " << library.error << "\n";
    return "";
  }
  const std::string path = AbsolutePath(library.path);
  if (const std::string problem = PreloadProblem(path); !problem.empty()) {
    err << "vgpu run: cannot preload " << path << ": " << problem << "\n";
    return "";
  }
  *source = library.source;
  return path;
}

// The driver the job will load; prints why not when none is found, and says so when it is the
// project's simulated one.
DriverInfo CheckDriver(const RunSpec& spec, std::ostream& err) {
  DriverInfo driver = ProbeDriver();
  if (!driver.found) {
    err << "vgpu: no NVIDIA driver found (libcuda.so.1: " << driver.error << "); nothing to limit, not running "
        << spec.command[0] << "\n";
  } else if (driver.simulated) {
    err << "vgpu: using the SIMULATED driver from " << driver.path << " \u2014 a test double, not a GPU\n";
  }
  return driver;
}

}  // namespace

int RunMain(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const RunSpecResult built = BuildRunSpec(args);
  if (!built.ok()) {
    err << "vgpu run: " << built.error << "\n";
    return kExitUsage;
  }
  const RunSpec& spec = built.spec;
  std::string library_source;
  const std::string library_path = ResolveLibrary(spec, &library_source, err);
  if (library_path.empty()) return kExitUsage;
  const DriverInfo driver = CheckDriver(spec, err);
  if (!driver.found) return kExitUnavailable;

  const RunLedger ledger = PrepareRunLedger(spec);
  if (!ledger.ok()) {
    err << "vgpu run: " << ledger.error << "\n";
    return kExitFailure;
  }
  const RunEnvironment job = BuildRunEnvironment(spec, CurrentEnvironment(), library_path, ledger.ledger_path);
  const std::string rejected = CheckWithLibraryParser(job.env);
  if (!rejected.empty()) {
    err << rejected << "\nvgpu run: the job's environment would be rejected by libvgpu; not running "
        << spec.command[0] << "\n";
    if (!ledger.run_dir.empty()) RemoveRunDirectory(ledger.run_dir);
    return kExitUsage;
  }
  if (spec.verbose) {
    err << "vgpu: library " << library_path << " (" << library_source << ")\n"
        << "vgpu: driver  " << driver.path
        << (driver.version ? " (CUDA " + FormatCudaVersion(*driver.version) + ")" : std::string()) << "\n";
    PrintChanges(job.changes, err);
  }

  int exit_code;
  {
    // Signals stay blocked until the run directory is removed: a late SIGTERM must not skip it.
    ScopedSignalBlock block;
    exit_code = RunAndWait(spec.command, job.env, block, err);
    if (!ledger.run_dir.empty()) {
      const std::string removed = RemoveRunDirectory(ledger.run_dir);
      if (!removed.empty()) err << "vgpu run: " << removed << "\n";
    }
    out.flush();
  }
  return exit_code;
}

}  // namespace vgpu::cli
