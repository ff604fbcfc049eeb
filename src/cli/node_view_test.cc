// The node-wide view's exchange with vgpu-node, against a scripted peer: a good reply is used, an
// error reply or a reply of another protocol version leaves the local view with a note.
#include "cli/node_view.h"

#include <gtest/gtest.h>

#include "protocol/test_peer.h"
#include "protocol/wire.h"

namespace vgpu::cli {
namespace {

using wire::testing::ScriptedPeer;

std::string QueryReplyFrame() {
  wire::QueryReply reply;
  reply.node = "node-7";
  wire::GpuInfo gpu;
  gpu.uuid = "GPU-test";
  gpu.name = "Test GPU";
  reply.gpus.push_back(gpu);
  return wire::EncodeFrame(wire::MessageType::kQueryReply, wire::EncodeQueryReply(reply));
}

NodeView Collect(const ScriptedPeer& peer) {
  NodeViewOptions options;
  options.socket = peer.path();
  return CollectNodeView(options);
}

TEST(NodeViewTest, UsesTheDaemonsAnswer) {
  ScriptedPeer peer(QueryReplyFrame(), false);
  const NodeView view = Collect(peer);
  EXPECT_TRUE(view.from_daemon) << view.note;
  EXPECT_EQ(view.node, "node-7");
  ASSERT_EQ(view.gpus.size(), 1u);
  EXPECT_EQ(view.gpus[0].uuid, "GPU-test");
  EXPECT_EQ(peer.last_request(), wire::EncodeFrame(wire::MessageType::kQueryRequest, ""));
}

TEST(NodeViewTest, AnotherProtocolVersionIsNotRead) {
  std::string v2 = QueryReplyFrame();
  v2[4] = 2;  // the u16 version of the header; the payload would decode
  ScriptedPeer peer(v2, false);
  const NodeView view = Collect(peer);
  EXPECT_FALSE(view.from_daemon);
  EXPECT_TRUE(view.gpus.empty());
  EXPECT_NE(view.note.find("protocol version 2"), std::string::npos) << view.note;
}

TEST(NodeViewTest, AnErrorReplyIsANote) {
  wire::ErrorReply e;
  e.status = wire::Status::kRefused;
  e.message = "host processes only";
  ScriptedPeer peer(wire::EncodeFrame(wire::MessageType::kErrorReply, wire::EncodeErrorReply(e)), false);
  const NodeView view = Collect(peer);
  EXPECT_FALSE(view.from_daemon);
  EXPECT_NE(view.note.find("host processes only"), std::string::npos) << view.note;
}

}  // namespace
}  // namespace vgpu::cli
