// A mode module as the Kubernetes device plugin will be one: registered by name, created by
// main, started with the daemon's interfaces, using them, stopped.
#include "node/mode_module.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "node/daemon.h"
#include "node/node_test_util.h"

namespace vgpu::node {
namespace {

class RecordingModule : public ModeModule {
 public:
  static inline int started = 0;
  static inline int stopped = 0;
  static inline std::string container_dir;
  static inline std::string socket;
  static inline std::string option;

  Status Start(const ModeContext& ctx) override {
    ++started;
    const auto it = ctx.config.module_options.find("test.greeting");
    option = it == ctx.config.module_options.end() ? "" : it->second;
    ContainerSpec spec;
    spec.pod_uid = "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e";
    spec.container_name = "main";
    spec.limits.default_memory_limit = 1ull << 30;
    ContainerRecord record;
    if (Status s = ctx.containers.Ensure(spec, &record); !s.ok) return s;
    container_dir = ctx.containers.ContainerDir(record.key);
    socket = ctx.containers.SocketPath();
    token_ = ctx.health.Subscribe([](const GpuHealth&) {});
    health_ = &ctx.health;
    return Status::Ok();
  }
  void Stop() override {
    ++stopped;
    health_->Unsubscribe(token_);
  }

 private:
  int token_ = 0;
  GpuHealthFeed* health_ = nullptr;
};

VGPU_NODE_REGISTER_MODE("test-recording", "records what it is given", [] { return std::make_unique<RecordingModule>(); });

TEST(ModeModuleTest, RegistryCreatesModulesByName) {
  EXPECT_EQ(CreateMode("no-such-mode"), nullptr);
  EXPECT_NE(CreateMode("test-recording"), nullptr);
  bool listed = false;
  for (const auto& [name, summary] : ListModes()) listed |= name == "test-recording" && summary == "records what it is given";
  EXPECT_TRUE(listed);
}

TEST(ModeModuleTest, AModuleUsesTheDaemonsInterfaces) {
  testing::TempDir dir;
  NodeConfig config;
  config.state_dir = dir.path();
  config.metrics_listen = "off";
  config.nvml_library = "off";
  config.module_options["test.greeting"] = "hello";
  Logger log;
  log.Configure(Level::kError, LogFormat::kLogfmt);
  Daemon daemon(config, log);
  ASSERT_TRUE(daemon.Start().ok);
  std::unique_ptr<ModeModule> module = CreateMode("test-recording");
  const ModeContext context{daemon.config(), daemon, daemon, log};
  const Status s = module->Start(context);
  ASSERT_TRUE(s.ok) << s.message;
  EXPECT_EQ(RecordingModule::started, 1);
  EXPECT_EQ(RecordingModule::option, "hello");
  EXPECT_EQ(RecordingModule::socket, dir.path() + "/vgpu.sock");
  EXPECT_EQ(RecordingModule::container_dir, dir.path() + "/containers/0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e_main");
  struct stat st;
  EXPECT_EQ(stat((RecordingModule::container_dir + "/ledger").c_str(), &st), 0);
  ASSERT_EQ(daemon.List().size(), 1u);
  EXPECT_TRUE(daemon.Inventory().empty());  // no NVML
  EXPECT_EQ(daemon.ContainerLedgerPath(), "/var/lib/vgpu/container/ledger");
  EXPECT_TRUE(daemon.Release(daemon.List()[0].key).ok);
  EXPECT_TRUE(daemon.List()[0].released());
  module->Stop();
  EXPECT_EQ(RecordingModule::stopped, 1);
  daemon.Stop();
  EXPECT_NE(stat((dir.path() + "/vgpu.sock").c_str(), &st), 0);
}

}  // namespace
}  // namespace vgpu::node
