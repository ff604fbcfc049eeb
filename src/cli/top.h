// `vgpu top`: a refreshing view of who uses what: per container (or `vgpu run` job) and GPU, the
// memory used against the limit (and, when any container may spill, the host memory spilled
// against the host spill limit), the measured compute share against the limit, the share of
// time the compute limiter held launches back over the last interval, and the live processes;
// with vgpu-node, the node's GPUs and any process bypassing vgpu.
//
// The data comes from the same node view as `vgpu ps` (node_view.h). FormatTopFrame is a pure
// function of two consecutive views, so frames are tested with made-up snapshots; TopMain is the
// loop (clear the terminal when stdout is one, else separate frames with a blank line).
#pragma once

#include <ostream>
#include <span>
#include <string>

#include "cli/args.h"
#include "cli/node_view.h"

namespace vgpu::cli {

std::span<const OptionSpec> TopOptions();

// One frame. `previous` (may be null: first frame) is the view `seconds` earlier; the THROTTLED
// column needs it ("-" otherwise). `when` is printed in the title.
std::string FormatTopFrame(const NodeView& now, const NodeView* previous, double seconds, const std::string& when);

// Exit status: 0; 1 when the view had unreadable ledgers in the last frame; 2 for a usage error.
int TopMain(const ParsedArgs& args, std::ostream& out, std::ostream& err);

}  // namespace vgpu::cli
