#include "cli/args.h"

namespace vgpu::cli {
namespace {

const OptionSpec* FindLong(std::span<const OptionSpec> specs, std::string_view name) {
  for (const OptionSpec& spec : specs) {
    if (spec.long_name == name) return &spec;
  }
  return nullptr;
}

const OptionSpec* FindShort(std::span<const OptionSpec> specs, char name) {
  for (const OptionSpec& spec : specs) {
    if (spec.short_name != 0 && spec.short_name == name) return &spec;
  }
  return nullptr;
}

std::string MissingValue(const OptionSpec& spec, std::string_view spelled) {
  return "option " + std::string(spelled) + " needs a value (" + std::string(spec.value_name) + ")";
}

}  // namespace

bool ParsedArgs::Has(std::string_view long_name) const {
  for (const ParsedOption& option : options) {
    if (option.spec->long_name == long_name) return true;
  }
  return false;
}

std::optional<std::string> ParsedArgs::Last(std::string_view long_name) const {
  std::optional<std::string> value;
  for (const ParsedOption& option : options) {
    if (option.spec->long_name == long_name) value = option.value;
  }
  return value;
}

ParseResult ParseArgs(std::span<const std::string> argv, std::span<const OptionSpec> specs,
                      OperandMode mode) {
  ParseResult result;
  ParsedArgs& args = result.args;
  size_t i = 0;
  auto fail = [&](std::string message) {
    result.error = std::move(message);
    return result;
  };
  while (i < argv.size()) {
    const std::string& arg = argv[i++];
    if (arg == "--") {
      args.operands.insert(args.operands.end(), argv.begin() + i, argv.end());
      return result;
    }
    if (arg.size() > 2 && arg.starts_with("--")) {
      const size_t eq = arg.find('=');
      const std::string_view name = std::string_view(arg).substr(2, eq == std::string::npos ? eq : eq - 2);
      const OptionSpec* spec = FindLong(specs, name);
      if (spec == nullptr) return fail("unknown option --" + std::string(name));
      if (!spec->TakesValue()) {
        if (eq != std::string::npos) return fail("option --" + std::string(name) + " takes no value");
        args.options.push_back({spec, ""});
      } else if (eq != std::string::npos) {
        args.options.push_back({spec, arg.substr(eq + 1)});
      } else {
        if (i >= argv.size()) return fail(MissingValue(*spec, arg));
        args.options.push_back({spec, argv[i++]});
      }
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      // A cluster of short options: flags, optionally ending in one that takes a value
      // ("-vh", "-v", "-mVALUE" style).
      for (size_t k = 1; k < arg.size(); ++k) {
        const OptionSpec* spec = FindShort(specs, arg[k]);
        if (spec == nullptr) return fail("unknown option -" + std::string(1, arg[k]));
        if (!spec->TakesValue()) {
          args.options.push_back({spec, ""});
          continue;
        }
        if (k + 1 < arg.size()) {
          args.options.push_back({spec, arg.substr(k + 1)});
        } else {
          if (i >= argv.size()) return fail(MissingValue(*spec, "-" + std::string(1, arg[k])));
          args.options.push_back({spec, argv[i++]});
        }
        break;
      }
      continue;
    }
    // An operand ("-" alone is one too, by convention).
    args.operands.push_back(arg);
    if (mode == OperandMode::kStopAtFirstOperand) {
      args.operands.insert(args.operands.end(), argv.begin() + i, argv.end());
      return result;
    }
  }
  return result;
}

std::string FormatOptionHelp(std::span<const OptionSpec> specs) {
  std::string text;
  for (const OptionSpec& spec : specs) {
    if (!text.empty()) text += '\n';
    text += "  ";
    text += spec.short_name != 0 ? std::string{'-', spec.short_name, ','} + " " : "    ";
    text += "--";
    text += spec.long_name;
    if (spec.TakesValue()) {
      text += ' ';
      text += spec.value_name;
    }
    text += '\n';
    std::string_view help = spec.help;
    while (!help.empty()) {
      const size_t nl = help.find('\n');
      const std::string_view line = help.substr(0, nl);
      if (!line.empty()) text.append("        ").append(line);
      text += '\n';
      if (nl == std::string_view::npos) break;
      help.remove_prefix(nl + 1);
    }
  }
  return text;
}

}  // namespace vgpu::cli
