#include "k8s/node_mode.h"

#include <gtest/gtest.h>

#include <set>

#include "node/mode_module.h"

namespace vgpu::k8s {
namespace {

TEST(NodeModeTest, ModesAreRegisteredWithTheDaemon) {
  std::set<std::string> names;
  for (const auto& [name, summary] : node::ListModes()) names.insert(name);
  for (const char* mode : {"hami", "volcano", "standalone"}) {
    EXPECT_EQ(names.count(mode), 1u) << mode;
    EXPECT_NE(node::CreateMode(mode), nullptr) << mode;
  }
}

TEST(NodeModeTest, OptionsComeFromTheModesNamespace) {
  node::NodeConfig daemon;
  daemon.node_name = "node-7";
  daemon.state_dir = "/srv/vgpu";
  daemon.module_options = {{"standalone.standalone_preset", "alnair"},
                           {"standalone.split_count", "4"},
                           {"hami.split_count", "99"}};  // another mode's option: ignored
  PluginConfig config;
  Status status = ConfigFromNode(PluginMode::kStandalone, daemon, &config);
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_EQ(config.mode, PluginMode::kStandalone);
  EXPECT_EQ(config.node_name, "node-7");
  EXPECT_EQ(config.paths.state_dir, "/srv/vgpu");
  EXPECT_EQ(config.split_count, 4);
  EXPECT_EQ(config.standalone_memory_resource, "alnair/vgpu-memory");

  daemon.module_options = {{"standalone.split_count", "zero"}};
  status = ConfigFromNode(PluginMode::kStandalone, daemon, &config);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("standalone.split_count"), std::string::npos) << status.message;
  daemon.module_options = {{"standalone.mode", "hami"}};
  EXPECT_FALSE(ConfigFromNode(PluginMode::kStandalone, daemon, &config).ok);
}

TEST(NodeModeTest, GpusCombineInventoryAndHealth) {
  node::GpuSample a;
  a.index = 0;
  a.uuid = "GPU-a";
  a.name = "NVIDIA H200";
  a.memory_total = 143771ull << 20;
  node::GpuSample b = a;
  b.index = 1;
  b.uuid = "GPU-b";
  node::GpuSample nameless = a;
  nameless.index = 2;
  nameless.uuid = "";
  node::GpuHealth sick;
  sick.index = 1;
  sick.uuid = "GPU-b";
  sick.healthy = false;
  auto gpus = GpusFromFeed({a, b, nameless}, {sick});
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].uuid, "GPU-a");
  EXPECT_TRUE(gpus[0].healthy);
  EXPECT_EQ(gpus[0].memory_bytes, 143771ull << 20);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_FALSE(gpus[1].healthy);
}

}  // namespace
}  // namespace vgpu::k8s
