// `vgpu ps`: who uses what, from the ledgers.
//
// FindLedgerPaths is the edge that reads directories; ReadLedgers opens each ledger read-only
// (never locking, never writing); FormatPsTable / FormatPsJson are pure functions of what was
// read, so the output is tested with made-up snapshots.
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"
#include "ledger/ledger.h"

namespace vgpu::cli {

std::span<const OptionSpec> PsOptions();

// Where to look. Empty fields are skipped.
struct LedgerSearch {
  std::string uid_root;         // /tmp/vgpu-<uid>: <uid_root>/ledger and <uid_root>/run-*/ledger
  std::string xdg_runtime_dir;  // $XDG_RUNTIME_DIR: <dir>/vgpu/run-*/ledger
  std::string ledger_dirs;      // $VGPU_LEDGER_DIRS, ':'-separated: <dir>/ledger and <dir>/*/ledger
  std::vector<std::string> operands;  // when given, the only places: files as given, and
                                      // directories searched like a $VGPU_LEDGER_DIRS entry
};

// LedgerSearch from the environment and geteuid().
LedgerSearch LedgerSearchFromProcess(std::vector<std::string> operands);

// Without operands: every ledger found in the places above (anything named `ledger` that exists,
// symlinks included, so that a refused one is still listed). With operands: only those, a
// directory searched like a $VGPU_LEDGER_DIRS entry, a file listed even when missing (it is
// reported). No duplicates; found paths are sorted, operand files keep their order, last.
std::vector<std::string> FindLedgerPaths(const LedgerSearch& search);

// What `vgpu ps` says about one path: a snapshot, or why there is none.
struct PsEntry {
  std::string path;
  std::string label;  // who the ledger belongs to, from vgpu-node ("" = unknown); see node_view.h
  std::string error;  // empty = `snapshot` is valid
  ledger::Snapshot snapshot;
  bool ok() const { return error.empty(); }
};

std::vector<PsEntry> ReadLedgers(const std::vector<std::string>& paths);

// Human-readable: per ledger a heading, a device table and a process table; errors inline.
std::string FormatPsTable(const std::vector<PsEntry>& entries);

// Left-aligned text columns, two spaces apart, every line indented by `indent` spaces (the tables
// of vgpu ps, vgpu top and the node-wide view).
std::string FormatColumns(const std::vector<std::vector<std::string>>& rows, size_t indent);

// `text` as a JSON string literal, quotes included (the JSON of vgpu ps and the node-wide view).
std::string JsonString(const std::string& text);

// {"ledgers": [...]} with every number in bytes / percent; see `vgpu ps --help`.
// `members` (JSON members each followed by ", ", e.g. the node view's) go before "ledgers".
std::string FormatPsJson(const std::vector<PsEntry>& entries, const std::string& members = "");

// Exit status: 0; 1 when any listed ledger could not be read; 2 for a usage error.
int PsMain(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace vgpu::cli
