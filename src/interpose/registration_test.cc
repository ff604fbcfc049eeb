// The library side of registration: settings, the pod uid from a cgroup, and the policy against a
// scripted fake daemon (answers ok, refuses, sends garbage, never answers, is absent).
#include "interpose/registration.h"

#include <gtest/gtest.h>

#include <map>

#include "protocol/test_peer.h"
#include "protocol/wire_transport.h"

namespace vgpu::registration {
namespace {

// vgpu-node's side, scripted.
using FakeDaemon = wire::testing::ScriptedPeer;

Settings Parse(std::map<std::string, std::string> vars) {
  return ParseSettings([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RegistrationSettingsTest, Defaults) {
  const Settings s = Parse({});
  EXPECT_EQ(s.socket, "");
  EXPECT_EQ(s.timeout_ms, kDefaultTimeoutMs);
  EXPECT_FALSE(s.required);
  EXPECT_TRUE(s.errors.empty());
}

TEST(RegistrationSettingsTest, ValuesAndErrors) {
  Settings s = Parse({{"VGPU_SOCKET", "/var/lib/vgpu/vgpu.sock"}, {"VGPU_REGISTRATION_TIMEOUT_MS", "250"},
                      {"VGPU_REGISTRATION_REQUIRED", "yes"}, {"VGPU_POD_UID", "abc"}, {"VGPU_CONTAINER_NAME", "main"}});
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.timeout_ms, 250);
  EXPECT_TRUE(s.required);
  s = Parse({{"VGPU_SOCKET", "relative.sock"}, {"VGPU_REGISTRATION_TIMEOUT_MS", "0"}, {"VGPU_REGISTRATION_REQUIRED", "maybe"},
             {"VGPU_CONTAINER_NAME", "a b"}});
  ASSERT_EQ(s.errors.size(), 4u);
  EXPECT_NE(s.errors[0].find("VGPU_SOCKET"), std::string::npos);
  EXPECT_NE(s.errors[1].find("VGPU_CONTAINER_NAME"), std::string::npos);
  EXPECT_NE(s.errors[2].find("VGPU_REGISTRATION_TIMEOUT_MS=\"0\""), std::string::npos);
  EXPECT_NE(s.errors[3].find("VGPU_REGISTRATION_REQUIRED"), std::string::npos);
  EXPECT_EQ(Parse({{"VGPU_REGISTRATION_TIMEOUT_MS", "60001"}}).errors.size(), 1u);
}

TEST(RegistrationSettingsTest, PodUidFromCgroup) {
  EXPECT_EQ(PodUidFromCgroup("0::/kubepods/burstable/pod0E5E6AC4-2a2f-4f22-9d0e-5d5d1c1a9c1e/abcdef\n"),
            "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e");
  EXPECT_EQ(PodUidFromCgroup("0::/kubepods.slice/kubepods-besteffort.slice/"
                             "kubepods-besteffort-pod0e5e6ac4_2a2f_4f22_9d0e_5d5d1c1a9c1e.slice/cri-containerd-1.scope\n"),
            "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e");
  EXPECT_EQ(PodUidFromCgroup("12:memory:/kubepods/pod0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e/x\n"),
            "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e");
  EXPECT_EQ(PodUidFromCgroup("0::/user.slice/user-0.slice/session-1.scope\n"), "");
  EXPECT_EQ(PodUidFromCgroup("0::/podnot-a-uid\n"), "");
}

std::string OkReply() {
  wire::RegisterReply r;
  r.host_pid = 31337;
  r.ledger_path = "/var/lib/vgpu/container/ledger";
  r.container_key = "pod_main";
  r.limits.default_memory_limit = 1 << 30;
  return wire::EncodeFrame(wire::MessageType::kRegisterReply, wire::EncodeRegisterReply(r));
}

Settings SettingsFor(const std::string& socket, bool required = false, int timeout_ms = 500) {
  Settings s;
  s.socket = socket;
  s.pod_uid = "pod";
  s.container_name = "main";
  s.required = required;
  s.timeout_ms = timeout_ms;
  return s;
}

TEST(RegistrationPolicyTest, UnsetSocketSkips) {
  EXPECT_EQ(Register(Settings{}, 1, "").outcome, Outcome::kSkipped);
}

TEST(RegistrationPolicyTest, AcceptedRegistrationCarriesTheAnswer) {
  FakeDaemon daemon(OkReply(), false);
  const Result r = Register(SettingsFor(daemon.path()), 77, "");
  ASSERT_EQ(r.outcome, Outcome::kRegistered) << r.message;
  EXPECT_EQ(r.reply.host_pid, 31337u);
  EXPECT_EQ(r.reply.ledger_path, "/var/lib/vgpu/container/ledger");
  // What was sent: a version-1 register request with our identity and pid.
  const std::string sent = daemon.last_request();
  ASSERT_GE(sent.size(), wire::kHeaderBytes);
  wire::FrameHeader h;
  ASSERT_EQ(wire::DecodeHeader(reinterpret_cast<const unsigned char*>(sent.data()), wire::kMaxRequestPayload, &h), "");
  EXPECT_EQ(h.type, wire::MessageType::kRegisterRequest);
  wire::RegisterRequest req;
  ASSERT_EQ(wire::DecodeRegisterRequest(std::string_view(sent).substr(wire::kHeaderBytes), &req), "");
  EXPECT_EQ(req.pod_uid, "pod");
  EXPECT_EQ(req.container_name, "main");
  EXPECT_EQ(req.pid, 77u);
}

TEST(RegistrationPolicyTest, PodUidComesFromTheCgroupWhenNotGiven) {
  FakeDaemon daemon(OkReply(), false);
  Settings s = SettingsFor(daemon.path());
  s.pod_uid.clear();
  ASSERT_EQ(Register(s, 1, "0::/kubepods/pod0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e/c\n").outcome, Outcome::kRegistered);
  wire::RegisterRequest req;
  ASSERT_EQ(wire::DecodeRegisterRequest(std::string_view(daemon.last_request()).substr(wire::kHeaderBytes), &req), "");
  EXPECT_EQ(req.pod_uid, "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e");
}

TEST(RegistrationPolicyTest, ARefusalIsAlwaysFatal) {
  wire::RegisterReply refused;
  refused.status = wire::Status::kRefused;
  refused.message = "pid 5 is in cgroup /x";
  FakeDaemon daemon(wire::EncodeFrame(wire::MessageType::kRegisterReply, wire::EncodeRegisterReply(refused)), false);
  const Result r = Register(SettingsFor(daemon.path(), /*required=*/false), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.message.find("pid 5 is in cgroup /x"), std::string::npos);
}

TEST(RegistrationPolicyTest, AnAbsentDaemonContinuesOrRefusesByPolicy) {
  const std::string missing = "/tmp/vgpu-no-such-dir/vgpu.sock";
  Result r = Register(SettingsFor(missing), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kContinued);
  EXPECT_NE(r.message.find(missing), std::string::npos);
  r = Register(SettingsFor(missing, /*required=*/true), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.message.find("VGPU_REGISTRATION_REQUIRED"), std::string::npos);
}

TEST(RegistrationPolicyTest, ASilentDaemonCostsTheTimeoutNotAHang) {
  FakeDaemon daemon("", true);
  const int64_t start = wire::MonotonicNs();
  const Result r = Register(SettingsFor(daemon.path(), false, 300), 1, "");
  const int64_t elapsed_ms = (wire::MonotonicNs() - start) / 1'000'000;
  EXPECT_EQ(r.outcome, Outcome::kContinued);
  EXPECT_NE(r.message.find("no reply within the timeout"), std::string::npos) << r.message;
  EXPECT_GE(elapsed_ms, 290);
  EXPECT_LT(elapsed_ms, 2000);
}

TEST(RegistrationPolicyTest, GarbageAndForeignVersionsAreProtocolFailures) {
  FakeDaemon garbage("HTTP/1.1 400 Bad Request\r\n\r\n", false);
  Result r = Register(SettingsFor(garbage.path()), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kContinued);
  EXPECT_NE(r.message.find("bad magic"), std::string::npos) << r.message;

  std::string v2 = OkReply();
  v2[4] = 2;
  FakeDaemon newer(v2, false);
  r = Register(SettingsFor(newer.path(), /*required=*/true), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.message.find("protocol version 2"), std::string::npos) << r.message;

  wire::ErrorReply e;
  e.status = wire::Status::kMalformed;
  e.message = "field 3 (pid) missing";
  FakeDaemon error(wire::EncodeFrame(wire::MessageType::kErrorReply, wire::EncodeErrorReply(e)), false);
  r = Register(SettingsFor(error.path()), 1, "");
  EXPECT_EQ(r.outcome, Outcome::kContinued);
  EXPECT_NE(r.message.find("could not read the request"), std::string::npos);
}

TEST(RegistrationPolicyTest, BadSettingsRefuse) {
  Settings s = SettingsFor("/x");
  s.errors.push_back("invalid VGPU_REGISTRATION_TIMEOUT_MS=\"x\"");
  const Result r = Register(s, 1, "");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.message.find("VGPU_REGISTRATION_TIMEOUT_MS"), std::string::npos);
}

}  // namespace
}  // namespace vgpu::registration
