#include "protocol/wire.h"

#include <gtest/gtest.h>

#include <random>

namespace vgpu::wire {
namespace {

RegisterReply SampleReply() {
  RegisterReply r;
  r.status = Status::kOk;
  r.host_pid = 4242;
  r.ledger_path = "/var/lib/vgpu/container/ledger";
  r.container_key = "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e_main";
  r.limits.default_memory_limit = 1ull << 30;
  r.limits.default_sm_limit = 30;
  r.limits.task_priority = 0;
  DeviceLimits d;
  d.ordinal = 1;
  d.uuid = "GPU-5151a000-0000-4000-8000-000000000001";
  d.memory_limit = 2ull << 30;
  d.sm_limit = 60;
  d.sm_soft_limit = 80;
  r.limits.devices.push_back(d);
  return r;
}

TEST(WireTest, HeaderRoundTripAndChecks) {
  FrameHeader h;
  h.type = MessageType::kRegisterRequest;
  h.payload_length = 12;
  unsigned char bytes[kHeaderBytes];
  EncodeHeader(h, bytes);
  EXPECT_EQ(bytes[0], 'V');
  EXPECT_EQ(bytes[1], 'G');
  EXPECT_EQ(bytes[2], 'P');
  EXPECT_EQ(bytes[3], 'R');
  FrameHeader back;
  EXPECT_EQ(DecodeHeader(bytes, kMaxRequestPayload, &back), "");
  EXPECT_EQ(back.version, kWireVersion);
  EXPECT_EQ(back.type, MessageType::kRegisterRequest);
  EXPECT_EQ(back.payload_length, 12u);

  h.payload_length = kMaxRequestPayload + 1;
  EncodeHeader(h, bytes);
  EXPECT_NE(DecodeHeader(bytes, kMaxRequestPayload, &back).find("exceeds the limit"), std::string::npos);
  bytes[0] = 'X';
  EXPECT_NE(DecodeHeader(bytes, kMaxRequestPayload, &back).find("bad magic"), std::string::npos);
  EncodeHeader(FrameHeader{}, bytes);
  bytes[12] = 1;
  EXPECT_NE(DecodeHeader(bytes, kMaxRequestPayload, &back).find("reserved"), std::string::npos);
}

TEST(WireTest, RequestRoundTrip) {
  RegisterRequest r{"0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e", "main", 7, "libvgpu"};
  RegisterRequest back;
  ASSERT_EQ(DecodeRegisterRequest(EncodeRegisterRequest(r), &back), "");
  EXPECT_EQ(back.pod_uid, r.pod_uid);
  EXPECT_EQ(back.container_name, r.container_name);
  EXPECT_EQ(back.pid, 7u);
  EXPECT_EQ(back.client, "libvgpu");
}

TEST(WireTest, ReplyRoundTrip) {
  const RegisterReply r = SampleReply();
  RegisterReply back;
  ASSERT_EQ(DecodeRegisterReply(EncodeRegisterReply(r), &back), "");
  EXPECT_EQ(back.status, Status::kOk);
  EXPECT_EQ(back.host_pid, 4242u);
  EXPECT_EQ(back.ledger_path, r.ledger_path);
  EXPECT_EQ(back.container_key, r.container_key);
  EXPECT_EQ(back.limits.default_memory_limit, 1ull << 30);
  EXPECT_EQ(back.limits.default_sm_limit, 30u);
  EXPECT_EQ(back.limits.task_priority, 0u);
  ASSERT_EQ(back.limits.devices.size(), 1u);
  EXPECT_EQ(back.limits.devices[0].ordinal, 1);
  EXPECT_EQ(back.limits.devices[0].uuid, r.limits.devices[0].uuid);
  EXPECT_EQ(back.limits.devices[0].memory_limit, 2ull << 30);
  EXPECT_EQ(back.limits.devices[0].sm_soft_limit, 80u);
}

TEST(WireTest, RefusalCarriesOnlyStatusAndMessage) {
  RegisterReply r;
  r.status = Status::kRefused;
  r.message = "pid 5 is in cgroup /x, outside demo_main's cgroup /y";
  RegisterReply back;
  ASSERT_EQ(DecodeRegisterReply(EncodeRegisterReply(r), &back), "");
  EXPECT_EQ(back.status, Status::kRefused);
  EXPECT_EQ(back.message, r.message);
  EXPECT_EQ(back.host_pid, 0u);
}

TEST(WireTest, QueryReplyRoundTrip) {
  QueryReply q;
  q.node = "node-1";
  q.containers.push_back({"p_c", "p", "c", "ns", "pod", "/var/lib/vgpu/containers/p_c/ledger", "/kubepods/podp/x", "active", 3});
  q.gpus.push_back({0, "GPU-1", "H200", 100, 50, 30, 0, "XID 79"});
  q.bypass.push_back({99, "p_c", "GPU-1", 1 << 20, 1700000000, "python"});
  QueryReply back;
  ASSERT_EQ(DecodeQueryReply(EncodeQueryReply(q), &back), "");
  EXPECT_EQ(back.node, "node-1");
  ASSERT_EQ(back.containers.size(), 1u);
  EXPECT_EQ(back.containers[0].registered, 3u);
  EXPECT_EQ(back.containers[0].cgroup, "/kubepods/podp/x");
  ASSERT_EQ(back.gpus.size(), 1u);
  EXPECT_EQ(back.gpus[0].healthy, 0u);
  EXPECT_EQ(back.gpus[0].health_reason, "XID 79");
  ASSERT_EQ(back.bypass.size(), 1u);
  EXPECT_EQ(back.bypass[0].comm, "python");
}

TEST(WireTest, MalformedPayloadsAreNamed) {
  RegisterRequest m;
  // pid missing
  EXPECT_NE(DecodeRegisterRequest(std::string("\x01\x00\x01\x00x", 5), &m).find("required field 3 (pid) missing"), std::string::npos);
  // pid of the wrong width
  EXPECT_NE(DecodeRegisterRequest(std::string("\x03\x00\x02\x00\x01\x00", 6), &m).find("expected 4 bytes, got 2"), std::string::npos);
  // length beyond the end
  EXPECT_NE(DecodeRegisterRequest(std::string("\x03\x00\x10\x00\x01\x00", 6), &m).find("claims 16 bytes"), std::string::npos);
  // a repeated singular field
  const std::string pid("\x03\x00\x04\x00\x07\x00\x00\x00", 8);
  EXPECT_NE(DecodeRegisterRequest(pid + pid, &m).find("repeated"), std::string::npos);
  // NUL inside a string
  EXPECT_NE(DecodeRegisterRequest(std::string("\x01\x00\x03\x00" "a\0b", 7) + pid, &m).find("NUL"), std::string::npos);
  // pid 0
  EXPECT_NE(DecodeRegisterRequest(std::string("\x03\x00\x04\x00\x00\x00\x00\x00", 8), &m).find("pid is 0"), std::string::npos);
  // unknown tags are skipped
  RegisterRequest ok;
  EXPECT_EQ(DecodeRegisterRequest(std::string("\x63\x00\x02\x00zz", 6) + pid, &ok), "");
  EXPECT_EQ(ok.pid, 7u);
}

TEST(WireTest, EveryTruncationOfAValidMessageIsHandled) {
  const std::string reply = EncodeRegisterReply(SampleReply());
  for (size_t n = 0; n < reply.size(); ++n) {
    RegisterReply back;
    const std::string problem = DecodeRegisterReply(reply.substr(0, n), &back);
    // Either rejected, or (cut exactly between fields) decoded without the cut fields.
    if (problem.empty()) {
      EXPECT_TRUE(back.status == Status::kOk);
    }
  }
}

TEST(WireTest, RandomMutationsNeverCrashTheDecoders) {
  std::mt19937 rng(20261121);
  const std::string seeds[] = {EncodeRegisterRequest({"pod", "c", 5, "x"}), EncodeRegisterReply(SampleReply()),
                               EncodeQueryReply(QueryReply{Status::kOk, "", "n", {{"k"}}, {{1, "u"}}, {{2}}})};
  int decoded = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string bytes = seeds[i % 3];
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes.erase(at, 1 + rng() % 4); break;
        case 2: bytes.insert(at, 1 + rng() % 4, static_cast<char>(rng())); break;
        case 3: bytes.resize(at); break;
      }
    }
    RegisterRequest a;
    RegisterReply b;
    QueryReply c;
    ErrorReply d;
    decoded += DecodeRegisterRequest(bytes, &a).empty();
    decoded += DecodeRegisterReply(bytes, &b).empty();
    decoded += DecodeQueryReply(bytes, &c).empty();
    decoded += DecodeErrorReply(bytes, &d).empty();
  }
  EXPECT_GT(decoded, 0);  // some mutations stay valid; the point is that none crashed
}

TEST(WireTest, ManyEmptyEntriesAreBounded) {
  std::string payload("\x01\x00\x04\x00\x00\x00\x00\x00", 8);
  for (int i = 0; i < 5000; ++i) payload += std::string("\x04\x00\x00\x00", 4);
  QueryReply q;
  EXPECT_NE(DecodeQueryReply(payload, &q).find("more than 4096 containers"), std::string::npos);
}

}  // namespace
}  // namespace vgpu::wire
