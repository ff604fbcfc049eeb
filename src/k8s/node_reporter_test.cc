#include "k8s/node_reporter.h"

#include <gtest/gtest.h>

#include <thread>

#include "k8s/fake_kube_api.h"

namespace vgpu::k8s {
namespace {

using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

class NodeReporterTest : public ::testing::Test {
 protected:
  NodeReporterTest() : inventory_({{"GPU-a", 0, 1ull << 30, "T", 0, true}}) {
    api_.Put(NodePath("n1"), {{"metadata", {{"name", "n1"}, {"annotations", Json::object()}}}});
    NodeReporterOptions options;
    options.node_name = "n1";
    options.interval = std::chrono::hours(1);  // only event-driven reports in these tests
    options.retry = 50ms;
    options.encode = [](const std::vector<GpuInfo>& gpus) {
      std::string text;
      for (const GpuInfo& gpu : gpus) text += gpu.uuid + (gpu.healthy ? "+" : "-");
      return text;
    };
    reporter_ = std::make_unique<NodeReporter>(options, &api_, &inventory_);
  }
  std::string Register() { return api_.Annotation(NodePath("n1"), "hami.io/node-nvidia-register"); }
  std::string Handshake() { return api_.Annotation(NodePath("n1"), "hami.io/node-handshake"); }

  FakeKubeApi api_;
  Inventory inventory_;
  std::unique_ptr<NodeReporter> reporter_;
};

TEST_F(NodeReporterTest, ReportsAtStartOnHealthChangesAndWhenTheSchedulerAsks) {
  reporter_->Start();
  ASSERT_TRUE(WaitFor([&] { return Register() == "GPU-a+"; }, 2s));
  EXPECT_EQ(Handshake().rfind("Reported ", 0), 0u);
  inventory_.Set({{"GPU-a", 0, 1ull << 30, "T", 0, false}});
  EXPECT_TRUE(WaitFor([&] { return Register() == "GPU-a-"; }, 2s)) << Register();
  // The scheduler's handshake request is answered (the node is watched).
  const int before = reporter_->reports();
  Json node = *api_.Object(NodePath("n1"));
  node["metadata"]["annotations"]["hami.io/node-handshake"] = "Requesting_2026.11.21 09:30:05";
  api_.Put(NodePath("n1"), node);
  EXPECT_TRUE(WaitFor([&] { return Handshake().rfind("Reported ", 0) == 0; }, 2s)) << Handshake();
  EXPECT_GT(reporter_->reports(), before);
  reporter_->Stop();
}

TEST_F(NodeReporterTest, RetriesWhileTheApiFails) {
  api_.FailNext("PATCH", NodePath("n1"), 3, 503);
  reporter_->Start();
  EXPECT_TRUE(WaitFor([&] { return Register() == "GPU-a+"; }, 3s));
  EXPECT_GE(api_.calls("PATCH"), 4);
  reporter_->Stop();
}

}  // namespace
}  // namespace vgpu::k8s
