#include "k8s/plugin_config.h"

#include <gtest/gtest.h>

#include <map>

namespace vgpu::k8s {
namespace {

auto Env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(PluginConfigTest, AppliesSettings) {
  PluginConfig config;
  ASSERT_TRUE(ApplyPluginSetting("mode", "standalone", &config).ok);
  ASSERT_TRUE(ApplyPluginSetting("standalone_preset", "alnair", &config).ok);
  ASSERT_TRUE(ApplyPluginSetting("state_dir", "/srv/vgpu/", &config).ok);
  ASSERT_TRUE(ApplyPluginSetting("split_count", "4", &config).ok);
  EXPECT_EQ(config.mode, PluginMode::kStandalone);
  EXPECT_EQ(config.standalone_memory_resource, "alnair/vgpu-memory");
  EXPECT_EQ(config.standalone_compute_resource, "alnair/vgpu-compute");
  EXPECT_EQ(config.paths.state_dir, "/srv/vgpu");
  EXPECT_EQ(config.split_count, 4);
  ASSERT_TRUE(FinishPluginConfig(Env({{"NODE_NAME", "node-1"}}), &config).ok);
  EXPECT_EQ(config.node_name, "node-1");
}

TEST(PluginConfigTest, RejectsBadValuesNamingThem) {
  PluginConfig config;
  struct Case {
    const char* key;
    const char* value;
  };
  for (const Case& c : {Case{"mode", "kube"}, Case{"split_count", "0"}, Case{"split_count", "ten"},
                        Case{"memory_scaling", "0.5"}, Case{"state_dir", "relative"}, Case{"hami_resource", "gpu"},
                        Case{"api_server", "http://insecure"}, Case{"standalone_preset", "other"},
                        Case{"no_such_key", "1"}}) {
    Status status = ApplyPluginSetting(c.key, c.value, &config);
    EXPECT_FALSE(status.ok) << c.key;
    EXPECT_NE(status.message.find(c.key), std::string::npos) << status.message;
  }
}

TEST(PluginConfigTest, SchedulerModesNeedTheApi) {
  PluginConfig config;
  ASSERT_TRUE(ApplyPluginSetting("mode", "hami", &config).ok);
  Status status = FinishPluginConfig(Env({{"NODE_NAME", "n"}}), &config);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("KUBERNETES_SERVICE_HOST"), std::string::npos) << status.message;
  PluginConfig no_node;
  ASSERT_TRUE(ApplyPluginSetting("mode", "standalone", &no_node).ok);
  EXPECT_FALSE(FinishPluginConfig(Env({}), &no_node).ok);
}

}  // namespace
}  // namespace vgpu::k8s
