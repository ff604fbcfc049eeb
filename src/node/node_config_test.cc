#include "node/node_config.h"

#include <gtest/gtest.h>

#include <map>

namespace vgpu::node {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  std::map<std::string, std::string> files;
  ConfigLoad Load(const std::vector<std::string>& args) {
    return LoadConfig(
        args,
        [this](const char* name) -> const char* {
          const auto it = vars.find(name);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        [this](const std::string& path, std::string* text) {
          const auto it = files.find(path);
          if (it == files.end()) {
            *text = "No such file or directory";
            return false;
          }
          *text = it->second;
          return true;
        });
  }
};

TEST(NodeConfigTest, DefaultsWithoutAnyInput) {
  Env env;
  env.vars["NODE_NAME"] = "n1";
  const ConfigLoad load = env.Load({});
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load.config.state_dir, "/var/lib/vgpu");
  EXPECT_EQ(load.config.SocketPath(), "/var/lib/vgpu/vgpu.sock");
  EXPECT_EQ(load.config.ContainersDir(), "/var/lib/vgpu/containers");
  EXPECT_EQ(load.config.metrics_listen, ":9394");
  EXPECT_EQ(load.config.bypass_action, BypassAction::kReport);
  EXPECT_EQ(load.config.node_name, "n1");
  EXPECT_EQ(load.config_file, "");  // the default file is optional
}

TEST(NodeConfigTest, FlagBeatsEnvironmentBeatsFileBeatsDefault) {
  Env env;
  env.files["/etc/vgpu/node.conf"] =
      "# comment\nstate_dir = /file\nscan_interval = 5s\nlog_level = debug  # trailing\nbypass_action = \"kill\"\n";
  env.vars["VGPU_NODE_STATE_DIR"] = "/env";
  env.vars["VGPU_NODE_SCAN_INTERVAL"] = "3s";
  const ConfigLoad load = env.Load({"--state-dir=/flag"});
  ASSERT_TRUE(load.ok()) << load.errors[0];
  EXPECT_EQ(load.config.state_dir, "/flag");
  EXPECT_EQ(load.config.scan_interval_ms, 3000);
  EXPECT_EQ(load.config.log_level, Level::kDebug);
  EXPECT_EQ(load.config.bypass_action, BypassAction::kKill);
  EXPECT_EQ(load.sources.at("state_dir"), Source::kFlag);
  EXPECT_EQ(load.sources.at("scan_interval"), Source::kEnvironment);
  EXPECT_EQ(load.sources.at("log_level"), Source::kFile);
  EXPECT_NE(DescribeConfig(load).find("state_dir = /flag  # flag"), std::string::npos);
}

TEST(NodeConfigTest, ErrorsNameKeyValueAndSource) {
  Env env;
  env.files["/c.conf"] = "scan_interval = 5\nbogus = 1\nmetrics_listen = nowhere\n";
  env.vars["VGPU_NODE_SOCKET_MODE"] = "999";
  const ConfigLoad load = env.Load({"--config", "/c.conf", "--bypass-action", "shoot", "--max-connections"});
  ASSERT_FALSE(load.ok());
  std::string all;
  for (const std::string& e : load.errors) all += e + "\n";
  EXPECT_NE(all.find("file /c.conf:1: invalid scan_interval=\"5\""), std::string::npos) << all;
  EXPECT_NE(all.find("file /c.conf:2: unknown key \"bogus\""), std::string::npos) << all;
  EXPECT_NE(all.find("invalid metrics_listen=\"nowhere\""), std::string::npos) << all;
  EXPECT_NE(all.find("VGPU_NODE_SOCKET_MODE: invalid socket_mode=\"999\""), std::string::npos) << all;
  EXPECT_NE(all.find("--bypass_action: invalid bypass_action=\"shoot\": expected report or kill"), std::string::npos) << all;
  EXPECT_NE(all.find("option --max-connections needs a value"), std::string::npos) << all;
}

TEST(NodeConfigTest, ANamedConfigFileMustExist) {
  Env env;
  EXPECT_FALSE(env.Load({"--config=/missing.conf"}).ok());
  env.vars["VGPU_NODE_CONFIG"] = "/also-missing.conf";
  EXPECT_FALSE(env.Load({}).ok());
}

TEST(NodeConfigTest, DottedKeysAreModuleOptions) {
  Env env;
  env.files["/etc/vgpu/node.conf"] = "k8s.resource_name = nvidia.com/gpu\n";
  const ConfigLoad load = env.Load({"--k8s.split-count=4", "--mode", "k8s"});
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load.config.mode, "k8s");
  EXPECT_EQ(load.config.module_options.at("k8s.resource_name"), "nvidia.com/gpu");
  EXPECT_EQ(load.config.module_options.at("k8s.split_count"), "4");
}

TEST(NodeConfigTest, XidListAndOperands) {
  Env env;
  const ConfigLoad load = env.Load({"--health-ignored-xids", "13, 31,", "--print-config", "extra"});
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load.config.health_ignored_xids, (std::vector<uint32_t>{13, 31}));
  EXPECT_TRUE(load.print_config);
  EXPECT_EQ(load.operands, std::vector<std::string>{"extra"});
  EXPECT_FALSE(env.Load({"--health-ignored-xids=13,x"}).ok());
}

}  // namespace
}  // namespace vgpu::node
