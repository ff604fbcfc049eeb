// The real vgpu-node on a unix socket in a temporary directory, with a fake /proc and cgroup tree
// (proc_root / cgroup_root), so cgroup membership is whatever the test writes for its children:
//   - 200 concurrent registrations from 200 processes all succeed;
//   - malformed, truncated, oversized, slow and random (fuzzed) input is rejected and the daemon
//     keeps serving;
//   - a process outside the claimed container's cgroup is refused;
//   - SIGTERM stops it cleanly; a restart rebuilds its state from the ledgers on disk;
//   - a container whose cgroup is gone and whose processes are dead is removed; orphan_grace
//     removes never-registered pods but not standalone grants;
//   - node-wide queries are answered only to host processes;
//   - the daemon creates the node-wide compute board; a non-root container process can charge
//     its ledger (the first one becomes its owner).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <random>

#include "daemon_harness.h"
#include "common/fork_together.h"
#include "ledger/board.h"
#include "ledger/ledger.h"
#include "node/container_store.h"

namespace vgpu::node::testing {
namespace {

constexpr char kPod[] = "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e";
const std::string kPodCgroup = std::string("/kubepods/burstable/pod") + kPod;

class RegistrationServerTest : public ::testing::Test {
 protected:
  RegistrationServerTest() : host_(dir_.path() + "/host") {
    MakeDirs(state());
    host_.MakeCgroup(kPodCgroup + "/ctr");
  }

  std::string state() const { return dir_.path() + "/state"; }

  std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> extra = {}) {
    extra.push_back("--proc-root=" + host_.proc_root());
    extra.push_back("--cgroup-root=" + host_.cgroup_root());
    extra.push_back("--nvml-library=off");
    auto d = std::make_unique<DaemonProcess>(state(), extra);
    EXPECT_TRUE(d->Start()) << d->log();
    return d;
  }

  void AddContainer(const std::string& pod, const std::string& name, const std::string& cgroup = "") {
    ContainerStore store(state() + "/containers");
    ASSERT_TRUE(store.Init().ok);
    ContainerSpec s;
    s.pod_uid = pod;
    s.container_name = name;
    s.cgroup = cgroup;
    s.limits.default_memory_limit = 1ull << 30;
    s.limits.default_sm_limit = 30;
    const Status st = store.Ensure(s, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
  }

  // Writes the fake /proc entry of a real pid (its real start time) in `cgroup`.
  void Fake(pid_t pid, const std::string& cgroup) {
    host_.AddProcess(pid, "0::" + cgroup, ledger::ProcessStartTime(pid), 1);
  }

  TempDir dir_;
  FakeHost host_;
};

struct ChildResult {
  int32_t status = -1;
  uint32_t host_pid = 0;
  int64_t latency_ns = 0;
  pid_t pid = 0;
};

// Forks `n` children that register at the same moment; returns what each got.
std::vector<ChildResult> RegisterConcurrently(int n, const std::string& socket, const std::function<void(pid_t)>& before_go) {
  auto child = [&] {
    ChildResult r;
    r.pid = getpid();
    const int64_t start = wire::MonotonicNs();
    const wire::ExchangeResult x = wire::Exchange(socket, RegisterFrame(kPod, "main", static_cast<uint32_t>(getpid())), 5000,
                                                  wire::kMaxReplyPayload);
    r.latency_ns = wire::MonotonicNs() - start;
    wire::RegisterReply reply;
    if (x.ok() && x.header.type == wire::MessageType::kRegisterReply && wire::DecodeRegisterReply(x.payload, &reply).empty()) {
      r.status = static_cast<int32_t>(reply.status);
      r.host_pid = reply.host_pid;
    }
    return r;
  };
  return ForkTogether<ChildResult>(n, child, [&](const std::vector<pid_t>& pids) {
    EXPECT_EQ(pids.size(), static_cast<size_t>(n));
    for (pid_t pid : pids) before_go(pid);
  });
}

TEST_F(RegistrationServerTest, TwoHundredConcurrentRegistrationsSucceed) {
  AddContainer(kPod, "main");
  auto daemon = StartDaemon();
  const std::vector<ChildResult> results =
      RegisterConcurrently(200, daemon->socket(), [&](pid_t pid) { Fake(pid, kPodCgroup + "/ctr"); });
  ASSERT_EQ(results.size(), 200u);
  int64_t worst = 0;
  for (const ChildResult& r : results) {
    EXPECT_EQ(r.status, 0) << "pid " << r.pid;
    EXPECT_EQ(r.host_pid, static_cast<uint32_t>(r.pid));
    worst = std::max(worst, r.latency_ns);
  }
  const std::string metrics = daemon->Metrics();
  EXPECT_EQ(MetricValue(metrics, "vgpu_registrations_total{result=\"ok\"}"), 200);
  EXPECT_EQ(MetricValue(metrics, "vgpu_registration_duration_seconds_count"), 200);
  // Latency targets live in bench/registration; here only a sanity bound.
  EXPECT_LT(worst, 5'000'000'000);
  EXPECT_TRUE(daemon->Running());
}

TEST_F(RegistrationServerTest, AProcessOutsideTheClaimedCgroupIsRefused) {
  AddContainer(kPod, "main");
  AddContainer("job7", "main", "/vgpu/job7");
  auto daemon = StartDaemon();
  Fake(getpid(), "/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/ctr");
  for (const auto& [pod, what] : std::vector<std::pair<std::string, std::string>>{{kPod, "which is not pod"}, {"job7", "outside job7_main's cgroup /vgpu/job7"}}) {
    const wire::ExchangeResult x = SendRaw(daemon->socket(), RegisterFrame(pod, "main", 1));
    ASSERT_TRUE(x.ok()) << x.error;
    wire::RegisterReply reply;
    ASSERT_EQ(wire::DecodeRegisterReply(x.payload, &reply), "");
    EXPECT_EQ(reply.status, wire::Status::kRefused);
    EXPECT_NE(reply.message.find(what), std::string::npos) << reply.message;
  }
  // The same process, once it really is in the pod, is accepted.
  Fake(getpid(), kPodCgroup + "/ctr");
  const wire::ExchangeResult ok = SendRaw(daemon->socket(), RegisterFrame(kPod, "main", 1));
  wire::RegisterReply reply;
  ASSERT_EQ(wire::DecodeRegisterReply(ok.payload, &reply), "");
  EXPECT_EQ(reply.status, wire::Status::kOk) << reply.message;
  const std::string metrics = daemon->Metrics();
  EXPECT_EQ(MetricValue(metrics, "vgpu_registrations_total{result=\"refused\"}"), 2);
  EXPECT_NE(daemon->log().find("msg=refused"), std::string::npos);
}

std::string Header(uint32_t magic, uint16_t version, uint16_t type, uint32_t length, uint32_t reserved = 0) {
  wire::FrameHeader h;
  h.magic = magic;
  h.version = version;
  h.type = static_cast<wire::MessageType>(type);
  h.payload_length = length;
  h.reserved = reserved;
  unsigned char b[wire::kHeaderBytes];
  wire::EncodeHeader(h, b);
  return std::string(reinterpret_cast<char*>(b), sizeof(b));
}

// The reply's error status, or -1 when there was no error reply.
int ErrorStatus(const wire::ExchangeResult& x) {
  if (!x.ok() || x.header.type != wire::MessageType::kErrorReply) return -1;
  wire::ErrorReply e;
  if (!wire::DecodeErrorReply(x.payload, &e).empty()) return -1;
  return static_cast<int>(e.status);
}

TEST_F(RegistrationServerTest, BadInputIsRejectedAndTheDaemonKeepsServing) {
  AddContainer(kPod, "main");
  auto daemon = StartDaemon({"--request-timeout=300ms"});
  const std::string sock = daemon->socket();
  const std::string valid = RegisterFrame(kPod, "main", 1);
  const uint16_t reg = static_cast<uint16_t>(wire::MessageType::kRegisterRequest);

  // Not a frame at all / bad magic / reserved bits.
  EXPECT_EQ(ErrorStatus(SendRaw(sock, "GET /metrics HTTP/1.1\r\n\r\n")), static_cast<int>(wire::Status::kMalformed));
  EXPECT_EQ(ErrorStatus(SendRaw(sock, Header(wire::kMagic, 1, reg, 0, 7))), static_cast<int>(wire::Status::kMalformed));
  // Oversized: refused from the header alone, the payload is never read.
  const wire::ExchangeResult big = SendRaw(sock, Header(wire::kMagic, 1, reg, 64u << 20));
  EXPECT_EQ(ErrorStatus(big), static_cast<int>(wire::Status::kMalformed));
  wire::ErrorReply e;
  wire::DecodeErrorReply(big.payload, &e);
  EXPECT_NE(e.message.find("exceeds the limit"), std::string::npos) << e.message;
  // Wrong version, unknown type, malformed payload.
  EXPECT_EQ(ErrorStatus(SendRaw(sock, Header(wire::kMagic, 9, reg, 0))), static_cast<int>(wire::Status::kUnsupportedVersion));
  EXPECT_EQ(ErrorStatus(SendRaw(sock, Header(wire::kMagic, 1, 77, 0))), static_cast<int>(wire::Status::kUnsupportedType));
  EXPECT_EQ(ErrorStatus(SendRaw(sock, Header(wire::kMagic, 1, reg, 6) + std::string("\x03\x00\x09\x00\x01\x02", 6))),
            static_cast<int>(wire::Status::kMalformed));
  // Truncated header / truncated payload (then the client waits): closed after the timeout,
  // without an answer.
  for (const std::string& cut : {valid.substr(0, 7), valid.substr(0, valid.size() - 3)}) {
    const int64_t start = wire::MonotonicNs();
    const wire::ExchangeResult x = SendRaw(sock, cut, 3000);
    EXPECT_FALSE(x.ok());
    EXPECT_EQ(x.failure, wire::Failure::kProtocol) << x.error;  // closed by the daemon, not our timeout
    EXPECT_LT((wire::MonotonicNs() - start) / 1'000'000, 2500);
  }
  // Fuzz: 2000 mutated frames and random byte strings.
  std::mt19937 rng(61);
  int answered = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = i % 4 == 0 ? std::string(rng() % 64, '\0') : valid;
    for (char& c : bytes) {
      if (i % 4 == 0) c = static_cast<char>(rng());
    }
    for (int k = 0, edits = 1 + static_cast<int>(rng() % 6); k < edits && !bytes.empty() && i % 4 != 0; ++k) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    if (bytes.size() >= wire::kHeaderBytes && i % 3 == 0) {
      // Keep the header consistent with the mutated payload so the payload decoder is reached.
      bytes = Header(wire::kMagic, 1, reg, static_cast<uint32_t>(bytes.size() - wire::kHeaderBytes)) + bytes.substr(wire::kHeaderBytes);
    }
    answered += SendAndClose(sock, bytes, 1000);
  }
  EXPECT_GT(answered, 0);
  EXPECT_TRUE(daemon->Running()) << daemon->log();

  // Still serving: a valid registration works.
  Fake(getpid(), kPodCgroup + "/ctr");
  const wire::ExchangeResult ok = SendRaw(sock, valid);
  wire::RegisterReply reply;
  ASSERT_EQ(wire::DecodeRegisterReply(ok.payload, &reply), "") << ok.error;
  EXPECT_EQ(reply.status, wire::Status::kOk);
  const std::string metrics = daemon->Metrics();
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"oversized\"}"), 1);
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"bad_frame\"}"), 2);
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"malformed\"}"), 1);
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"timeout\"}"), 1);
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"unsupported_version\"}"), 1);
  EXPECT_GE(MetricValue(metrics, "vgpu_registration_rejects_total{reason=\"unsupported_type\"}"), 1);
}

TEST_F(RegistrationServerTest, IdleConnectionsCannotExhaustTheDaemon) {
  AddContainer(kPod, "main");
  auto daemon = StartDaemon({"--max-connections=8", "--request-timeout=5s"});
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", daemon->socket().c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  usleep(200000);
  // The ninth is closed at once (no hang), and counted.
  const wire::ExchangeResult x = SendRaw(daemon->socket(), RegisterFrame(kPod, "main", 1), 2000);
  EXPECT_FALSE(x.ok());
  EXPECT_EQ(x.failure, wire::Failure::kProtocol) << x.error;
  for (int fd : idle) close(fd);
  EXPECT_TRUE(WaitFor(3000, [&] {
    Fake(getpid(), kPodCgroup + "/ctr");
    return SendRaw(daemon->socket(), RegisterFrame(kPod, "main", 1)).ok();
  }));
  EXPECT_GE(MetricValue(daemon->Metrics(), "vgpu_registration_rejects_total{reason=\"too_many_connections\"}"), 1);
}

TEST_F(RegistrationServerTest, SigtermStopsCleanlyAndARestartRebuildsFromTheLedgers) {
  AddContainer(kPod, "main");
  auto daemon = StartDaemon();
  // A live process of the container: registered, and (as the library does) in the ledger with
  // the host pid the daemon answered.
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  Fake(child, kPodCgroup + "/ctr");
  const std::string ledger_path = state() + "/containers/" + kPod + "_main/ledger";
  ledger::LedgerStatus status;
  std::string disagreement;
  auto ledger = ledger::Ledger::Open(ledger_path, ledger::LimitSet{}, &status, &disagreement);
  ASSERT_NE(ledger, nullptr) << status.message;
  ASSERT_GE(ledger->RegisterProcess(child, child, ledger::ProcessStartTime(child)), 0);

  EXPECT_TRUE(daemon->Running()) << daemon->log();
  EXPECT_EQ(daemon->Terminate(), 0) << daemon->log();
  struct stat st;
  EXPECT_NE(lstat(daemon->socket().c_str(), &st), 0) << "socket file left behind";
  EXPECT_NE(daemon->log().find("msg=\"shutting down\" signal=SIGTERM"), std::string::npos) << daemon->log();
  EXPECT_NE(daemon->log().find("msg=stopped"), std::string::npos);

  auto again = StartDaemon();
  const std::string metrics = again->Metrics();
  const std::string labels = std::string("{pod_uid=\"") + kPod + "\",namespace=\"\",pod=\"" + kPod + "\",container=\"main\"}";
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_registered_processes" + labels), 1) << metrics;
  EXPECT_EQ(MetricValue(metrics, "vgpu_container_processes" + labels), 1);
  EXPECT_EQ(MetricValue(metrics, "vgpu_node_containers"), 1);
  EXPECT_NE(again->log().find("registered_processes=1"), std::string::npos) << again->log();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST_F(RegistrationServerTest, TheComputeBoardIsCreatedForTheContainers) {
  auto daemon = StartDaemon();
  const std::string board = state() + "/board";
  struct stat st;
  ASSERT_EQ(lstat(board.c_str(), &st), 0) << daemon->log();
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666u) << "every container's processes write heartbeats";
  // A container process opens it (what the plugin's mount + VGPU_BOARD lead to) and uses it.
  ledger::LedgerStatus status;
  auto opened = ledger::Board::Open(board, &status);
  ASSERT_NE(opened, nullptr) << status.message;
  std::string error;
  EXPECT_NE(opened->Lookup("GPU-5151a000-0000-4000-8000-000000000000", &error), nullptr) << error;
  EXPECT_NE(daemon->log().find("msg=\"compute board ready\""), std::string::npos) << daemon->log();
  // A restart keeps the board (and what containers wrote there).
  EXPECT_EQ(daemon->Terminate(), 0);
  auto again = StartDaemon();
  struct stat st2;
  ASSERT_EQ(lstat(board.c_str(), &st2), 0);
  EXPECT_EQ(st2.st_ino, st.st_ino);
}

TEST_F(RegistrationServerTest, AForeignFileAtTheBoardPathStopsTheStart) {
  WriteFile(state() + "/board", "not a board");
  DaemonProcess daemon(state(), {"--proc-root=" + host_.proc_root(), "--cgroup-root=" + host_.cgroup_root(), "--nvml-library=off"});
  EXPECT_FALSE(daemon.Start());
  EXPECT_NE(daemon.log().find("compute board " + state() + "/board"), std::string::npos) << daemon.log();
  EXPECT_EQ(ReadFile(state() + "/board"), "not a board") << "never overwritten";
}

struct UidRegistration {
  int32_t status = -1;
  int32_t ledger_opened = 0;  // 1 when the child could open the ledger for charging
  char message[512] = {};
};

// Registers from a child running as uid:gid, which then opens the ledger read-write as the library
// does after a successful registration.
UidRegistration RegisterAs(uid_t uid, const std::string& socket, const std::string& ledger_path,
                           const std::function<void(pid_t)>& before_go) {
  auto child = [&] {
    UidRegistration r;
    if (setgid(uid) == 0 && setuid(uid) == 0) {
      const wire::ExchangeResult x = wire::Exchange(socket, RegisterFrame(kPod, "main", static_cast<uint32_t>(getpid())),
                                                    5000, wire::kMaxReplyPayload);
      wire::RegisterReply reply;
      if (x.ok() && wire::DecodeRegisterReply(x.payload, &reply).empty()) {
        r.status = static_cast<int32_t>(reply.status);
        snprintf(r.message, sizeof(r.message), "%s", reply.message.c_str());
      }
      ledger::LedgerStatus status;
      std::string disagreement;
      r.ledger_opened = ledger::Ledger::Open(ledger_path, ledger::LimitSet{}, &status, &disagreement) != nullptr;
      if (!r.ledger_opened && r.message[0] == '\0') snprintf(r.message, sizeof(r.message), "%s", status.message.c_str());
    }
    return r;
  };
  const std::vector<UidRegistration> got = ForkTogether<UidRegistration>(1, child, [&](const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) before_go(pid);
  });
  EXPECT_EQ(got.size(), 1u);
  return got.empty() ? UidRegistration{} : got[0];
}

TEST_F(RegistrationServerTest, ANonRootContainerProcessCanChargeItsLedger) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run a child as another uid)";
  AddContainer(kPod, "main");
  // The test's temporary directories are private; the host's state dir is 0755.
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(state().c_str(), 0755), 0);
  auto daemon = StartDaemon();
  const std::string ledger_path = state() + "/containers/" + kPod + "_main/ledger";
  struct stat st;
  ASSERT_EQ(stat(ledger_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // The first non-root process becomes the ledger's owner and can charge it.
  const auto fake = [&](pid_t pid) { Fake(pid, kPodCgroup + "/ctr"); };
  const UidRegistration first = RegisterAs(65534, daemon->socket(), ledger_path, fake);
  EXPECT_EQ(first.status, 0) << first.message;
  EXPECT_EQ(first.ledger_opened, 1) << first.message;
  ASSERT_EQ(stat(ledger_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  EXPECT_EQ(st.st_mode & 07777, 0644u) << "never group- or world-writable";
  // The record and the directory stay the daemon's.
  struct stat dir_st;
  ASSERT_EQ(stat((state() + "/containers/" + kPod + "_main").c_str(), &dir_st), 0);
  EXPECT_EQ(dir_st.st_uid, 0u);

  // Another non-root uid could not charge it: refused, with the reason.
  const UidRegistration second = RegisterAs(65533, daemon->socket(), ledger_path, fake);
  EXPECT_EQ(second.status, static_cast<int32_t>(wire::Status::kRefused));
  EXPECT_NE(std::string(second.message).find("belongs to uid 65534 (its first registered process); a process of uid 65533"),
            std::string::npos)
      << second.message;
  // Root changes nothing.
  Fake(getpid(), kPodCgroup + "/ctr");
  wire::RegisterReply reply;
  ASSERT_EQ(wire::DecodeRegisterReply(SendRaw(daemon->socket(), RegisterFrame(kPod, "main", 1)).payload, &reply), "");
  EXPECT_EQ(reply.status, wire::Status::kOk) << reply.message;
  ASSERT_EQ(stat(ledger_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_NE(daemon->log().find("msg=\"ledger given to the container's uid\""), std::string::npos) << daemon->log();
}

TEST_F(RegistrationServerTest, AStaleSocketIsReplacedAndALiveOneIsNot) {
  AddContainer(kPod, "main");
  auto first = StartDaemon();
  DaemonProcess second(state(), {"--proc-root=" + host_.proc_root(), "--cgroup-root=" + host_.cgroup_root(), "--nvml-library=off"});
  EXPECT_FALSE(second.Start());
  EXPECT_NE(second.log().find("another daemon is listening"), std::string::npos) << second.log();
  kill(first->pid(), SIGKILL);  // leaves its socket file behind
  usleep(100000);
  auto third = StartDaemon();
  EXPECT_TRUE(third->Running());
}

TEST_F(RegistrationServerTest, AGoneContainerIsRemovedOnceItsProcessesAreDead) {
  host_.MakeCgroup("/vgpu/jobA");
  host_.MakeCgroup("/vgpu/jobB");
  AddContainer("jobA", "main", "/vgpu/jobA");
  AddContainer("jobB", "main", "/vgpu/jobB");
  auto daemon = StartDaemon({"--scan-interval=100ms"});
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  Fake(child, "/vgpu/jobB");
  // jobB has a live process in its ledger.
  ledger::LedgerStatus status;
  std::string dis;
  auto ledger = ledger::Ledger::Open(state() + "/containers/jobB_main/ledger", ledger::LimitSet{}, &status, &dis);
  ASSERT_NE(ledger, nullptr);
  ASSERT_GE(ledger->RegisterProcess(child, child, ledger::ProcessStartTime(child)), 0);

  host_.RemoveCgroup("/vgpu/jobA");
  host_.RemoveCgroup("/vgpu/jobB");
  struct stat st;
  EXPECT_TRUE(WaitFor(3000, [&] { return lstat((state() + "/containers/jobA_main").c_str(), &st) != 0; })) << daemon->log();
  usleep(400000);
  EXPECT_EQ(lstat((state() + "/containers/jobB_main").c_str(), &st), 0) << "removed while a process lives";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  host_.RemoveProcess(child);  // the fake /proc follows the real one
  ledger.reset();
  EXPECT_TRUE(WaitFor(3000, [&] { return lstat((state() + "/containers/jobB_main").c_str(), &st) != 0; })) << daemon->log();
  EXPECT_EQ(MetricValue(daemon->Metrics(), "vgpu_containers_removed_total"), 2);
  EXPECT_NE(daemon->log().find("removed container directory"), std::string::npos);
}

// A Kubernetes container that never registered is removed once orphan_grace has passed without a
// cgroup of its pod; a standalone grant (its pod uid is no Kubernetes uid, so it names no cgroup)
// stays until its mode module releases it, also long after orphan_grace.
TEST_F(RegistrationServerTest, OrphanGraceRemovesPodsNeverSeenButNotStandaloneGrants) {
  const std::string never_seen = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
  AddContainer(never_seen, "main");
  AddContainer("standalone-85faaee06c5721be", "vgpu");
  auto daemon = StartDaemon({"--scan-interval=100ms", "--orphan-grace=1s"});
  struct stat st;
  EXPECT_TRUE(WaitFor(5000, [&] { return lstat((state() + "/containers/" + never_seen + "_main").c_str(), &st) != 0; }))
      << daemon->log();
  usleep(1500000);
  EXPECT_EQ(lstat((state() + "/containers/standalone-85faaee06c5721be_vgpu").c_str(), &st), 0)
      << "a standalone grant was removed by the orphan rule\n" << daemon->log();
}

TEST_F(RegistrationServerTest, QueriesAreForHostProcessesOnly) {
  AddContainer(kPod, "main");
  host_.SetNamespace("self", "pid", "pid:[4026531836]");
  auto daemon = StartDaemon();
  const std::string query = wire::EncodeFrame(wire::MessageType::kQueryRequest, "");
  // Our fake entry says: another pid namespace.
  Fake(getpid(), kPodCgroup + "/ctr");
  host_.SetNamespace(std::to_string(getpid()), "pid", "pid:[4026532000]");
  EXPECT_EQ(ErrorStatus(SendRaw(daemon->socket(), query)), static_cast<int>(wire::Status::kRefused));
  host_.SetNamespace(std::to_string(getpid()), "pid", "pid:[4026531836]");
  const wire::ExchangeResult x = SendRaw(daemon->socket(), query);
  ASSERT_EQ(x.header.type, wire::MessageType::kQueryReply) << x.error;
  wire::QueryReply reply;
  ASSERT_EQ(wire::DecodeQueryReply(x.payload, &reply), "");
  ASSERT_EQ(reply.containers.size(), 1u);
  EXPECT_EQ(reply.containers[0].key, std::string(kPod) + "_main");
  EXPECT_EQ(reply.containers[0].state, "active");
  EXPECT_EQ(reply.containers[0].ledger_path, state() + "/containers/" + kPod + "_main/ledger");
}

}  // namespace
}  // namespace vgpu::node::testing
