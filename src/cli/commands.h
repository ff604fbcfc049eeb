// The subcommand table of the `vgpu` CLI and the dispatcher over it.
//
// Adding a command (e.g. `vgpu ps`, `vgpu top`, reading the ledgers) is one entry in the table in
// commands.cc: its name, help texts, option table and handler. Parsing, `--help`, `vgpu help
// <cmd>` and the top-level command list all come from that entry.
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "cli/args.h"

namespace vgpu::cli {

struct Command {
  std::string_view name;
  std::string_view summary;      // one line, for the command list
  std::string_view usage;        // "vgpu run [options] [--] command [args...]"
  std::string_view description;  // paragraphs printed after the usage line
  std::span<const OptionSpec> (*options)();
  OperandMode operand_mode;
  std::string_view epilog;       // printed after the options (environment, exit status)
  // Called after a successful parse without --help. Returns the process exit status.
  int (*handler)(const ParsedArgs& args, std::ostream& out, std::ostream& err);
};

std::span<const Command> Commands();
const Command* FindCommand(std::string_view name);

std::string MainHelp();
std::string CommandHelp(const Command& command);

// Runs `vgpu <args...>` (args excludes the program name) and returns the exit status.
// Usage errors: one line on `err`, status 2.
int Dispatch(std::span<const std::string> args, std::ostream& out, std::ostream& err);

}  // namespace vgpu::cli
