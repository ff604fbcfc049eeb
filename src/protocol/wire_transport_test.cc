// The client transport against a scripted peer: each Failure of the contract (wire_transport.h)
// and a good exchange.
#include "protocol/wire_transport.h"

#include <errno.h>
#include <gtest/gtest.h>

#include "protocol/test_peer.h"

namespace vgpu::wire {
namespace {

using testing::ScriptedPeer;

std::string ErrorFrame(const std::string& message) {
  ErrorReply e;
  e.status = Status::kMalformed;
  e.message = message;
  return EncodeFrame(MessageType::kErrorReply, EncodeErrorReply(e));
}

const std::string kQuery = EncodeFrame(MessageType::kQueryRequest, "");

TEST(WireTransportTest, OneFrameOutOneFrameIn) {
  ScriptedPeer peer(ErrorFrame("no"), false);
  const ExchangeResult r = Exchange(peer.path(), kQuery, 1000, kMaxReplyPayload);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.header.version, kWireVersion);
  EXPECT_EQ(r.header.type, MessageType::kErrorReply);
  ErrorReply e;
  ASSERT_EQ(DecodeErrorReply(r.payload, &e), "");
  EXPECT_EQ(e.message, "no");
  EXPECT_EQ(peer.last_request(), kQuery);
}

TEST(WireTransportTest, NoSocketIsUnreachable) {
  const ExchangeResult r = Exchange("/tmp/vgpu-no-such-dir/vgpu.sock", kQuery, 1000, kMaxReplyPayload);
  EXPECT_EQ(r.failure, Failure::kUnreachable);
  EXPECT_NE(r.error.find("/tmp/vgpu-no-such-dir/vgpu.sock"), std::string::npos) << r.error;
  EXPECT_EQ(Exchange("", kQuery, 1000, kMaxReplyPayload).failure, Failure::kUnreachable);
  EXPECT_EQ(Exchange("/" + std::string(200, 'x'), kQuery, 1000, kMaxReplyPayload).failure, Failure::kUnreachable);
}

TEST(WireTransportTest, ASilentPeerCostsTheDeadlineNotAHang) {
  ScriptedPeer peer("", true);
  const int64_t start = MonotonicNs();
  const ExchangeResult r = Exchange(peer.path(), kQuery, 200, kMaxReplyPayload);
  const int64_t elapsed_ms = (MonotonicNs() - start) / 1'000'000;
  EXPECT_EQ(r.failure, Failure::kTimeout);
  EXPECT_NE(r.error.find("no reply within the timeout"), std::string::npos) << r.error;
  EXPECT_GE(elapsed_ms, 190);
  EXPECT_LT(elapsed_ms, 2000);
}

TEST(WireTransportTest, WhatIsNotAFrameIsAProtocolFailure) {
  ScriptedPeer garbage("HTTP/1.1 400 Bad Request\r\n\r\n", false);
  ExchangeResult r = Exchange(garbage.path(), kQuery, 1000, kMaxReplyPayload);
  EXPECT_EQ(r.failure, Failure::kProtocol);
  EXPECT_NE(r.error.find("bad magic"), std::string::npos) << r.error;

  const std::string frame = ErrorFrame("truncated");
  ScriptedPeer truncated(frame.substr(0, frame.size() - 1), false);
  r = Exchange(truncated.path(), kQuery, 1000, kMaxReplyPayload);
  EXPECT_EQ(r.failure, Failure::kProtocol);
  EXPECT_NE(r.error.find("connection closed"), std::string::npos) << r.error;

  ScriptedPeer nothing("", false);
  EXPECT_EQ(Exchange(nothing.path(), kQuery, 1000, kMaxReplyPayload).failure, Failure::kProtocol);
}

TEST(WireTransportTest, AReplyOverTheLimitIsRefusedUnread) {
  ScriptedPeer peer(ErrorFrame(std::string(100, 'm')), false);
  const ExchangeResult r = Exchange(peer.path(), kQuery, 1000, /*max_reply_payload=*/16);
  EXPECT_EQ(r.failure, Failure::kProtocol);
  EXPECT_TRUE(r.payload.empty());
}

TEST(WireTransportTest, AnotherVersionIsTheCallersToJudge) {
  std::string v2 = ErrorFrame("newer");
  v2[4] = 2;  // the u16 version of the header
  ScriptedPeer peer(v2, false);
  const ExchangeResult r = Exchange(peer.path(), kQuery, 1000, kMaxReplyPayload);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.header.version, 2);
}

TEST(WireTransportTest, ErrnoIsPreserved) {
  errno = EDOM;
  Exchange("/tmp/vgpu-no-such-dir/vgpu.sock", kQuery, 100, kMaxReplyPayload);
  EXPECT_EQ(errno, EDOM);
}

}  // namespace
}  // namespace vgpu::wire
