#include "cli/run_dir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "ledger/ledger.h"

namespace vgpu::cli {
namespace {

std::string Errno(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + strerror(err);
}

// Creates `dir` with mode 0700, or accepts an existing one that is private to us.
std::string EnsurePrivateDirectory(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) == 0) {
    if (chmod(dir.c_str(), 0700) != 0) return Errno("cannot chmod", dir, errno);  // undo umask
    return "";
  }
  if (errno != EEXIST) return Errno("cannot create", dir, errno);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Errno("cannot stat", dir, errno);
  if (!S_ISDIR(st.st_mode)) return "refusing to use " + dir + ": not a directory (or a symlink)";
  if (st.st_uid != geteuid()) {
    return "refusing to use " + dir + ": owned by uid " + std::to_string(st.st_uid) + ", not " +
           std::to_string(geteuid());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return "refusing to use " + dir + ": writable by group or others";
  }
  return "";
}

// vgpu run is the ledger's authority: the limits are in the file before the job starts, so
// its processes find them there (and report any environment that disagrees).
std::string WriteRunLimits(const RunSpec& spec, const std::string& path) {
  const ledger::LedgerStatus status = ledger::Ledger::WriteLimits(path, RunLimits(spec));
  return status.ok ? "" : status.message;
}

}  // namespace

std::string ChooseRunRoot(const char* xdg_runtime_dir, uid_t uid) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
    struct stat st;
    if (stat(xdg_runtime_dir, &st) == 0 && S_ISDIR(st.st_mode) &&
        access(xdg_runtime_dir, W_OK | X_OK) == 0) {
      return std::string(xdg_runtime_dir) + "/vgpu";
    }
  }
  return "/tmp/vgpu-" + std::to_string(uid);
}

RunLedger PrepareRunLedgerIn(const RunSpec& spec, const std::string& root, pid_t pid, std::time_t now) {
  RunLedger ledger;
  if (!spec.ledger_path.empty()) {
    // The library requires an absolute path; the job may change directory.
    std::error_code ec;
    ledger.ledger_path = std::filesystem::absolute(spec.ledger_path, ec).lexically_normal().string();
    if (ec) {
      ledger.error = "cannot make --ledger " + spec.ledger_path + " absolute: " + ec.message();
    } else {
      ledger.error = WriteRunLimits(spec, ledger.ledger_path);
    }
    return ledger;
  }
  ledger.error = EnsurePrivateDirectory(root);
  if (!ledger.ok()) return ledger;
  const std::string base = root + "/run-" + std::to_string(pid) + "-" + std::to_string(static_cast<long long>(now));
  // A clash needs the same pid within the same second (pid reuse); take the next free name.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string dir = attempt == 0 ? base : base + "." + std::to_string(attempt);
    if (mkdir(dir.c_str(), 0700) == 0) {
      if (chmod(dir.c_str(), 0700) != 0) {
        ledger.error = Errno("cannot chmod", dir, errno);
        rmdir(dir.c_str());
        return ledger;
      }
      ledger.run_dir = dir;
      ledger.ledger_path = dir + "/ledger";
      ledger.error = WriteRunLimits(spec, ledger.ledger_path);
      if (!ledger.ok()) {
        RemoveRunDirectory(dir);
        ledger.run_dir.clear();
      }
      return ledger;
    }
    if (errno != EEXIST) {
      ledger.error = Errno("cannot create", dir, errno);
      return ledger;
    }
  }
  ledger.error = "cannot create a run directory under " + root + ": every name is taken";
  return ledger;
}

RunLedger PrepareRunLedger(const RunSpec& spec) {
  return PrepareRunLedgerIn(spec, ChooseRunRoot(getenv("XDG_RUNTIME_DIR"), geteuid()), getpid(),
                            std::time(nullptr));
}

std::string RemoveRunDirectory(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::remove_all(run_dir, ec);
  if (ec) return "cannot remove " + run_dir + ": " + ec.message();
  return "";
}

}  // namespace vgpu::cli
