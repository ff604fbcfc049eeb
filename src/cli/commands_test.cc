#include "cli/commands.h"

#include <gtest/gtest.h>

#include <sstream>

namespace vgpu::cli {
namespace {

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome Call(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = Dispatch(args, out, err);
  return {code, out.str(), err.str()};
}

bool Contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

TEST(CommandsTest, TableHasRunInfoAndHelp) {
  ASSERT_NE(FindCommand("run"), nullptr);
  ASSERT_NE(FindCommand("info"), nullptr);
  ASSERT_NE(FindCommand("help"), nullptr);
  EXPECT_EQ(FindCommand("nope"), nullptr);
}

TEST(CommandsTest, MainHelpListsEveryCommand) {
  const Outcome r = Call({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const Command& command : Commands()) {
    EXPECT_TRUE(Contains(r.out, "  " + std::string(command.name) + " ")) << command.name;
    EXPECT_TRUE(Contains(r.out, command.summary)) << command.name;
  }
  EXPECT_EQ(Call({"-h"}).out, r.out);
  EXPECT_EQ(Call({"help"}).out, r.out);
}

TEST(CommandsTest, NoArgumentsIsAUsageError) {
  const Outcome r = Call({});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "Usage: vgpu <command>"));
  EXPECT_TRUE(r.out.empty());
}

TEST(CommandsTest, Version) {
  const Outcome r = Call({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "vgpu " VGPU_VERSION "\n");
}

TEST(CommandsTest, EveryCommandsHelpDocumentsEveryOption) {
  for (const Command& command : Commands()) {
    const Outcome r = Call({std::string(command.name), "--help"});
    EXPECT_EQ(r.code, 0) << command.name;
    EXPECT_TRUE(Contains(r.out, "Usage: " + std::string(command.usage))) << command.name;
    for (const OptionSpec& option : command.options()) {
      EXPECT_TRUE(Contains(r.out, "--" + std::string(option.long_name))) << command.name << " " << option.long_name;
      EXPECT_FALSE(option.help.empty()) << option.long_name;
    }
    EXPECT_EQ(Call({"help", std::string(command.name)}).out, r.out) << command.name;
  }
}

TEST(CommandsTest, RunHelpSaysInheritedLimitsAreRemoved) {
  const std::string help = Call({"run", "--help"}).out;
  EXPECT_TRUE(Contains(help, "REMOVES every inherited limit variable")) << help;
  EXPECT_TRUE(Contains(help, "CUDA_MEM_LIMIT")) << help;
  EXPECT_TRUE(Contains(help, "WRAPPER_MAX_MEMORY")) << help;
  EXPECT_TRUE(Contains(help, "Exit status")) << help;
}

TEST(CommandsTest, UsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"frobnicate"}, "vgpu: unknown command \"frobnicate\""},
      {{"--frobnicate"}, "vgpu: unknown option --frobnicate"},
      {{"run", "--nope", "--", "true"}, "vgpu run: unknown option --nope (see 'vgpu run --help')"},
      {{"run", "--memory"}, "vgpu run: option --memory needs a value (SIZE)"},
      // Values are validated before anything is probed or run.
      {{"run", "--memory", "12x", "--", "true"}, "vgpu run: invalid --memory value \"12x\""},
      {{"run", "--compute", "101", "--", "true"}, "vgpu run: invalid --compute value \"101\""},
      {{"run", "--memory", "1g"}, "vgpu run: no command given"},
      {{"info", "extra"}, "vgpu info: unexpected argument \"extra\""},
      {{"help", "nope"}, "vgpu help: unknown command \"nope\""},
  };
  for (const Case& c : cases) {
    const Outcome r = Call(c.args);
    EXPECT_EQ(r.code, 2) << c.message;
    EXPECT_TRUE(Contains(r.err, c.message)) << r.err;
    EXPECT_TRUE(r.out.empty()) << c.message;
  }
}

TEST(CommandsTest, HelpWinsOverOtherOptions) {
  const Outcome r = Call({"run", "--memory", "12x", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Contains(r.out, "Usage: vgpu run"));
}

}  // namespace
}  // namespace vgpu::cli
