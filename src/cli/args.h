// A small table-driven command-line parser for the vgpu CLI.
//
// Each subcommand declares its options as a table of OptionSpec; ParseArgs turns argv (without
// the program and subcommand names) into the options in command-line order plus the operands.
// The same table produces the help text (FormatOptionHelp), so a new option is declared once.
//
// Accepted syntax (getopt_long-like, no abbreviations):
//   --name VALUE   --name=VALUE   -x VALUE   -xVALUE     options that take a value
//   --name         -x             -xy (cluster of flags)  flags
//   --                                                    ends the options
// A value is taken from the next argument even when it starts with '-' ("--memory -1" yields the
// value "-1", which the option's validator then rejects by name).
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vgpu::cli {

struct OptionSpec {
  std::string_view long_name;   // without the leading "--", e.g. "memory"
  char short_name = 0;          // e.g. 'v'; 0 = none
  std::string_view value_name;  // e.g. "SIZE"; empty = a flag that takes no value
  std::string_view help;        // may span lines ('\n'); shown indented under the option

  bool TakesValue() const { return !value_name.empty(); }
};

enum class OperandMode {
  // Options and operands may be interleaved ("vgpu help run").
  kInterleaved,
  // The first operand and everything after it are operands, options included
  // ("vgpu run --memory 1g python -v x.py": "-v" belongs to python).
  kStopAtFirstOperand,
};

struct ParsedOption {
  const OptionSpec* spec = nullptr;  // points into the table given to ParseArgs
  std::string value;                 // empty for flags
};

struct ParsedArgs {
  std::vector<ParsedOption> options;  // in command-line order, repeats kept
  std::vector<std::string> operands;

  bool Has(std::string_view long_name) const;
  // Value of the last occurrence, nullopt if absent.
  std::optional<std::string> Last(std::string_view long_name) const;
};

struct ParseResult {
  ParsedArgs args;
  std::string error;  // empty = success; otherwise a one-line message without a prefix
  bool ok() const { return error.empty(); }
};

// REQUIRES: the OptionSpec objects in `specs` outlive the returned ParsedArgs.
ParseResult ParseArgs(std::span<const std::string> argv, std::span<const OptionSpec> specs,
                      OperandMode mode);

// Help text for a table: one "  -v, --verbose" / "      --memory SIZE" line per option, the
// help text indented below it, a blank line between options.
std::string FormatOptionHelp(std::span<const OptionSpec> specs);

}  // namespace vgpu::cli
