#include "cli/args.h"

#include <gtest/gtest.h>

#include <array>

namespace vgpu::cli {
namespace {

constexpr std::array kSpecs = {
    OptionSpec{"memory", 'm', "SIZE", "Memory limit.\nSecond line."},
    OptionSpec{"verbose", 'v', "", "Talk more."},
    OptionSpec{"help", 'h', "", "Help."},
};

ParseResult Parse(std::vector<std::string> argv, OperandMode mode = OperandMode::kStopAtFirstOperand) {
  return ParseArgs(argv, kSpecs, mode);
}

TEST(ArgsTest, LongOptionWithSeparateValue) {
  const ParseResult r = Parse({"--memory", "4GiB", "--", "cmd"});
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.args.options.size(), 1u);
  EXPECT_EQ(r.args.options[0].spec->long_name, "memory");
  EXPECT_EQ(r.args.options[0].value, "4GiB");
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"cmd"}));
}

TEST(ArgsTest, LongOptionWithEquals) {
  const ParseResult r = Parse({"--memory=0=1g,1=2g", "cmd"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.args.Last("memory"), "0=1g,1=2g");  // only the first '=' separates
}

TEST(ArgsTest, EmptyValueWithEqualsIsKept) {
  const ParseResult r = Parse({"--memory=", "cmd"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.args.Last("memory"), "");
}

TEST(ArgsTest, ShortFlagsAndClusters) {
  const ParseResult r = Parse({"-vh", "-m1g", "-m", "2g", "x"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.args.Has("verbose"));
  EXPECT_TRUE(r.args.Has("help"));
  ASSERT_EQ(r.args.options.size(), 4u);
  EXPECT_EQ(r.args.options[2].value, "1g");
  EXPECT_EQ(r.args.Last("memory"), "2g");
}

TEST(ArgsTest, ClusterEndingInValueOption) {
  const ParseResult r = Parse({"-vm", "3g", "x"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.args.Has("verbose"));
  EXPECT_EQ(r.args.Last("memory"), "3g");
}

TEST(ArgsTest, DoubleDashEndsOptions) {
  const ParseResult r = Parse({"-v", "--", "--memory", "1g", "-v"}, OperandMode::kInterleaved);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.args.options.size(), 1u);
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"--memory", "1g", "-v"}));
}

TEST(ArgsTest, StopAtFirstOperandLeavesTheCommandsOptionsAlone) {
  const ParseResult r = Parse({"--memory", "1g", "python", "-v", "--memory", "x.py"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.args.Has("verbose"));
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"python", "-v", "--memory", "x.py"}));
}

TEST(ArgsTest, InterleavedModeParsesOptionsAfterOperands) {
  const ParseResult r = Parse({"run", "--help"}, OperandMode::kInterleaved);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.args.Has("help"));
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"run"}));
}

TEST(ArgsTest, SingleDashIsAnOperand) {
  const ParseResult r = Parse({"-", "x"}, OperandMode::kInterleaved);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"-", "x"}));
}

TEST(ArgsTest, ValueStartingWithDashIsTaken) {
  const ParseResult r = Parse({"--memory", "-1", "cmd"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.args.Last("memory"), "-1");
  EXPECT_EQ(r.args.operands, (std::vector<std::string>{"cmd"}));
}

TEST(ArgsTest, RepeatsAreKeptInOrderAndLastWins) {
  const ParseResult r = Parse({"--memory", "1g", "--verbose", "--memory", "2g"});
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.args.options.size(), 3u);
  EXPECT_EQ(r.args.options[0].value, "1g");
  EXPECT_EQ(r.args.options[2].value, "2g");
  EXPECT_EQ(r.args.Last("memory"), "2g");
  EXPECT_FALSE(r.args.Last("help").has_value());
}

TEST(ArgsTest, Errors) {
  struct Case {
    std::vector<std::string> argv;
    std::string error;
  };
  const Case cases[] = {
      {{"--nope"}, "unknown option --nope"},
      {{"--nope=3"}, "unknown option --nope"},
      {{"-x"}, "unknown option -x"},
      {{"-vx"}, "unknown option -x"},
      {{"--mem", "1g"}, "unknown option --mem"},  // no abbreviations
      {{"--memory"}, "option --memory needs a value (SIZE)"},
      {{"-m"}, "option -m needs a value (SIZE)"},
      {{"--verbose=yes"}, "option --verbose takes no value"},
  };
  for (const Case& c : cases) {
    const ParseResult r = Parse(c.argv);
    EXPECT_FALSE(r.ok()) << c.argv[0];
    EXPECT_EQ(r.error, c.error);
  }
}

TEST(ArgsTest, EmptyArgv) {
  const ParseResult r = Parse({});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.args.options.empty());
  EXPECT_TRUE(r.args.operands.empty());
}

TEST(ArgsTest, OptionHelpListsEveryOptionWithItsText) {
  const std::string help = FormatOptionHelp(kSpecs);
  EXPECT_NE(help.find("  -m, --memory SIZE\n        Memory limit.\n        Second line.\n"), std::string::npos)
      << help;
  EXPECT_NE(help.find("  -v, --verbose\n        Talk more.\n"), std::string::npos) << help;
  constexpr std::array kNoShort = {OptionSpec{"ledger", 0, "PATH", "x"}};
  EXPECT_EQ(FormatOptionHelp(kNoShort), "      --ledger PATH\n        x\n");
}

}  // namespace
}  // namespace vgpu::cli
