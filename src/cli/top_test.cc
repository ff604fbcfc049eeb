#include "cli/top.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "cli/commands.h"

namespace vgpu::cli {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

bool Contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

NodeView View(uint64_t throttled_ns, int32_t share_ppm) {
  NodeView v;
  v.from_daemon = true;
  v.node = "gpu-node-1";
  PsEntry e;
  e.path = "/var/lib/vgpu/containers/uid_main/ledger";
  e.label = "container batch/trainer/main (pod uid uid), 2 registered";
  e.snapshot.authority = ledger::Authority::kNodeDaemon;
  ledger::DeviceUsage d;
  d.index = 0;
  d.ordinal = 0;
  d.uuid = "GPU-5151a000-0000-4000-8000-000000000000";
  d.memory_limit = 4 * kGiB;
  d.used = kGiB;
  d.sm_limit = 30;
  d.share_ppm = share_ppm;
  d.busy_ns = 1'000'000;
  d.throttled_ns = throttled_ns;
  e.snapshot.devices.push_back(d);
  ledger::ProcessUsage p;
  p.alive = true;
  e.snapshot.processes = {p, p};
  v.entries.push_back(e);
  PsEntry job;
  job.path = "/tmp/vgpu-0/run-1-2/ledger";
  job.snapshot.default_memory_limit = 512 * kMiB;
  v.entries.push_back(job);
  PsEntry broken;
  broken.path = "/x/ledger";
  broken.error = "ledger /x/ledger: truncated";
  v.entries.push_back(broken);
  wire::GpuInfo g;
  g.index = 0;
  g.uuid = d.uuid;
  g.name = "NVIDIA H200";
  g.memory_total = 141 * kGiB;
  g.memory_used = 2 * kGiB;
  g.utilization = 35;
  v.gpus.push_back(g);
  wire::BypassInfo b;
  b.host_pid = 4242;
  b.comm = "python";
  b.container_key = "uid_main";
  b.gpu_uuid = d.uuid;
  b.memory = 512 * kMiB;
  v.bypass.push_back(b);
  return v;
}

TEST(TopFormatTest, ShareAgainstLimitMemoryAndThrottling) {
  const NodeView before = View(1'000'000'000, 290'000);
  const NodeView now = View(1'500'000'000, 301'000);
  const std::string first = FormatTopFrame(now, nullptr, 2.0, "2026-11-21T00:00:00Z");
  EXPECT_TRUE(Contains(first, "vgpu top - node gpu-node-1 (vgpu-node) - 2026-11-21T00:00:00Z\n")) << first;
  EXPECT_TRUE(Contains(first,
                       "CONTAINER                   GPU             MEMORY USED / LIMIT    COMPUTE SHARE / LIMIT  THROTTLED  PROCS\n"
                       "batch/trainer/main          0 GPU-5151a000  1 GiB / 4 GiB (25.0%)  30.1% / 30%            -          2\n"
                       "/tmp/vgpu-0/run-1-2/ledger  -               0 B / 512 MiB          - / unlimited          -          0\n"))
      << first;
  EXPECT_TRUE(Contains(first, "unreadable: /x/ledger: ledger /x/ledger: truncated\n")) << first;
  EXPECT_TRUE(Contains(first, "GPU 0 GPU-5151a000-0000-4000-8000-000000000000 NVIDIA H200: 2 GiB / 141 GiB, utilization 35%, healthy\n")) << first;
  EXPECT_TRUE(Contains(first, "BYPASS: host pid 4242 (python) in uid_main holds 512 MiB on GPU-5151a000-0000-4000-8000-000000000000 outside vgpu\n")) << first;
  // 0.5 s held back over 2 s.
  const std::string second = FormatTopFrame(now, &before, 2.0, "2026-11-21T00:00:02Z");
  EXPECT_TRUE(Contains(second, "30.1% / 30%            25.0%      2\n")) << second;
}

TEST(TopFormatTest, HostSpillColumnOnlyWhenSomethingMaySpill) {
  NodeView spilling = View(0, 0);
  ledger::DeviceUsage& d = spilling.entries[0].snapshot.devices[0];
  d.host_limit = 4 * kGiB;
  d.spilled = 1536 * kMiB;
  const std::string frame = FormatTopFrame(spilling, nullptr, 2.0, "T");
  EXPECT_TRUE(Contains(frame,
                       "CONTAINER                   GPU             MEMORY USED / LIMIT    HOST SPILL / LIMIT  COMPUTE SHARE / LIMIT  THROTTLED  PROCS\n"
                       "batch/trainer/main          0 GPU-5151a000  1 GiB / 4 GiB (25.0%)  1.50 GiB / 4 GiB    0.0% / 30%             -          2\n"
                       "/tmp/vgpu-0/run-1-2/ledger  -               0 B / 512 MiB          -                   - / unlimited          -          0\n"))
      << frame;
  EXPECT_FALSE(Contains(FormatTopFrame(View(0, 0), nullptr, 2.0, "T"), "HOST SPILL"));
}

TEST(TopFormatTest, NothingToShow) {
  NodeView empty;
  EXPECT_EQ(FormatTopFrame(empty, nullptr, 1, "T"), "vgpu top - local ledgers - T\nno vgpu containers or jobs found\n");
}

TEST(TopCommandTest, OptionsAreValidatedAndOnceIsOneFrame) {
  std::ostringstream out, err;
  const std::vector<std::string> bad = {"top", "--interval", "0.01"};
  EXPECT_EQ(Dispatch(bad, out, err), 2);
  EXPECT_TRUE(Contains(err.str(), "invalid --interval \"0.01\"")) << err.str();
  const std::vector<std::string> bad2 = {"top", "--iterations", "0"};
  EXPECT_EQ(Dispatch(bad2, out, err), 2);

  char pattern[] = "/tmp/vgpu-top-test.XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::string path = dir + "/ledger";
  ledger::LimitSet limits{ledger::Authority::kVgpuRun, 2 * kGiB, 40, 0, 1, {}};
  ASSERT_TRUE(ledger::Ledger::WriteLimits(path, limits).ok);
  std::ostringstream once;
  const std::vector<std::string> args = {"top", "--once", "--local", path};
  EXPECT_EQ(Dispatch(args, once, err), 0) << err.str();
  EXPECT_TRUE(Contains(once.str(), "vgpu top - local ledgers - ")) << once.str();
  EXPECT_TRUE(Contains(once.str(), path + "  -    0 B / 2 GiB          - / 40%                -          0\n")) << once.str();
  const std::string one = once.str();
  EXPECT_EQ(std::count(one.begin(), one.end(), '\n'), 3);  // title, header, one row

  std::ostringstream two;
  const std::vector<std::string> args2 = {"top", "--iterations", "2", "--interval", "0.1", path};
  EXPECT_EQ(Dispatch(args2, two, err), 0);
  const std::string both = two.str();
  EXPECT_EQ(std::count(both.begin(), both.end(), '\n'), 7) << both;  // two frames + a blank line
  std::filesystem::remove_all(dir);
}

TEST(TopCommandTest, HelpDocumentsTheColumnsAndOptions) {
  const Command* top = FindCommand("top");
  ASSERT_NE(top, nullptr);
  const std::string help = CommandHelp(*top);
  for (const char* part : {"--once", "--interval", "--iterations", "COMPUTE SHARE / LIMIT", "MEMORY USED / LIMIT", "HOST SPILL / LIMIT", "THROTTLED", "Exit status"}) {
    EXPECT_TRUE(Contains(help, part)) << part;
  }
}

}  // namespace
}  // namespace vgpu::cli
