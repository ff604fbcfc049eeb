// The node-wide view behind `vgpu ps` and `vgpu top`: the ledgers vgpu-node manages (asked over
// its socket, with each container's identity, the GPUs and the processes that bypass vgpu),
// plus every ledger the local search finds (`vgpu run` jobs). Without a reachable daemon, the
// local search alone (including <state_dir>/containers when it exists).
//
// Liveness: a process in a node-daemon ledger is judged by its host pid (the ledger's `pid` is
// in the container's pid namespace); elsewhere by its pid, as before.
#pragma once

#include <string>
#include <vector>

#include "cli/ps.h"
#include "protocol/wire.h"

namespace vgpu::cli {

struct NodeViewOptions {
  bool local = false;                 // never ask the daemon
  std::string socket;                 // "" = DefaultNodeSocket()
  int timeout_ms = 1000;
  std::vector<std::string> operands;  // ledger paths / directories: then only those, no daemon
};

struct NodeView {
  bool from_daemon = false;
  std::string note;  // why the view is local although a daemon socket exists ("" otherwise)
  std::string socket;
  std::string node;
  std::vector<PsEntry> entries;
  std::vector<wire::GpuInfo> gpus;
  std::vector<wire::BypassInfo> bypass;
  LedgerSearch search;  // what the local search covered
};

// $VGPU_SOCKET when set, else /var/lib/vgpu/vgpu.sock.
std::string DefaultNodeSocket();

NodeView CollectNodeView(const NodeViewOptions& options);

// GPU and bypass tables of a daemon view ("" when not from the daemon). Pure.
std::string FormatNodeTables(const NodeView& view);

// The JSON members "node", "gpus", "bypass" (each followed by ", "), or "" when not from the
// daemon. Pure.
std::string FormatNodeJsonMembers(const NodeView& view);

}  // namespace vgpu::cli
