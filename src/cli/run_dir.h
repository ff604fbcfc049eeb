// The per-run directory that holds a `vgpu run` job's ledger.
//
// Layout: <root>/run-<pid>-<unix time>/ledger, where <root> is $XDG_RUNTIME_DIR/vgpu when
// XDG_RUNTIME_DIR is set, absolute and writable, else /tmp/vgpu-<uid>. The root and the run
// directory are private (mode 0700, owned by the caller); an existing root that is a symlink,
// not a directory, owned by someone else or writable by group/others is refused rather than
// used (/tmp is shared: another user could have created /tmp/vgpu-<uid> first).
//
// PrepareRunLedger is where `vgpu run` becomes the ledger's authority: it creates the ledger
// (mode 0644) and writes the RunSpec's limits into it (RunLimits, Authority::kVgpuRun) before the
// job starts. An existing --ledger file keeps its processes' charges and gets the new limits; a
// file there that is not a valid ledger (or a symlink) is refused, never overwritten.
#pragma once

#include <sys/types.h>

#include <ctime>
#include <string>

#include "cli/run_spec.h"

namespace vgpu::cli {

struct RunLedger {
  std::string ledger_path;  // value for CUDA_DEVICE_MEMORY_SHARED_CACHE
  std::string run_dir;      // directory to remove when the job ends; empty = nothing to remove
  std::string error;        // empty = ready
  bool ok() const { return error.empty(); }
};

// $XDG_RUNTIME_DIR/vgpu or /tmp/vgpu-<uid>. `xdg_runtime_dir` may be null.
// Reads the file system only to test that XDG_RUNTIME_DIR is a writable directory.
std::string ChooseRunRoot(const char* xdg_runtime_dir, uid_t uid);

// With spec.ledger_path set: returns it, made absolute, with the limits written into it (its
// directory must exist; run_dir empty). Otherwise creates <root> (if missing) and a fresh run
// directory in it, for `pid` at `now`, holding the ledger. On error nothing is left behind.
RunLedger PrepareRunLedgerIn(const RunSpec& spec, const std::string& root, pid_t pid, std::time_t now);

// PrepareRunLedgerIn with the root from the environment, getpid() and time().
RunLedger PrepareRunLedger(const RunSpec& spec);

// Removes `run_dir` and everything in it (symlinks are removed, not followed).
// Returns an error message, empty on success.
std::string RemoveRunDirectory(const std::string& run_dir);

}  // namespace vgpu::cli
