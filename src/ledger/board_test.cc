// The node-wide board file: creation and mode, one entry per GPU uuid shared across mappings and
// processes, each GPU's turn beside its priorities, refusals of foreign, truncated and wrong-version files, a full board.
#include "ledger/board.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "ledger/ledger_test_util.h"

namespace vgpu::ledger {
namespace {

using testing::TempDir;

std::unique_ptr<Board> MustOpenBoard(const std::string& path) {
  LedgerStatus status;
  std::unique_ptr<Board> board = Board::Open(path, &status);
  EXPECT_TRUE(status.ok) << status.message;
  return board;
}

// Two mappings of one board file, as two processes would have.
class TwoMappingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = MustOpenBoard(dir_.File("board"));
    b_ = MustOpenBoard(dir_.File("board"));
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    a = a_.get();
    b = b_.get();
  }
  TempDir dir_;
  std::unique_ptr<Board> a_, b_;
  Board* a = nullptr;
  Board* b = nullptr;
  std::string error;
};

TEST(BoardTest, CreatesAWorldSharedFileWhateverTheUmask) {
  TempDir dir;
  const mode_t old = umask(077);
  std::unique_ptr<Board> board = MustOpenBoard(dir.File("board"));
  umask(old);
  ASSERT_NE(board, nullptr);
  EXPECT_EQ(testing::Mode(dir.File("board")), 0666);
}

TEST_F(TwoMappingsTest, OneEntryPerUuidSharedByEveryMapping) {
  compute::PriorityBoard* a0 = a->Lookup("GPU-0000", &error);
  compute::PriorityBoard* a1 = a->Lookup("GPU-1111", &error);
  ASSERT_NE(a0, nullptr) << error;
  ASSERT_NE(a1, nullptr) << error;
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a->Lookup("GPU-0000", &error), a0);
  compute::PriorityBoard* b0 = b->Lookup("GPU-0000", &error);
  ASSERT_NE(b0, nullptr) << error;
  a0->heartbeat_ns[0].store(12345);
  EXPECT_EQ(b0->heartbeat_ns[0].load(), 12345);
  EXPECT_EQ(b->Lookup("GPU-1111", &error)->heartbeat_ns[0].load(), 0);
}

TEST_F(TwoMappingsTest, EachGpuHasATurnBesideItsPriorities) {
  compute::GpuTurn* a0 = nullptr;
  compute::GpuTurn* a1 = nullptr;
  compute::GpuTurn* b0 = nullptr;
  compute::PriorityBoard* p0 = a->Lookup("GPU-0000", &error, &a0);
  ASSERT_NE(p0, nullptr) << error;
  ASSERT_NE(a->Lookup("GPU-1111", &error, &a1), nullptr) << error;
  ASSERT_NE(b->Lookup("GPU-0000", &error, &b0), nullptr) << error;
  ASSERT_NE(a0, nullptr);
  EXPECT_NE(a0, a1);
  // The documented place: 32 bytes before the PriorityBoard of the same entry (docs/ledger.md).
  EXPECT_EQ(reinterpret_cast<char*>(p0) - reinterpret_cast<char*>(a0), 128 - 96);
  EXPECT_EQ(a0->holder.load(), 0u);  // all-zero: nobody holds the turn
  EXPECT_EQ(a0->until_ns.load(), 0);
  a0->holder.store(7);
  a0->until_ns.store(99);
  EXPECT_EQ(b0->holder.load(), 7u);  // another mapping sees it
  EXPECT_EQ(b0->until_ns.load(), 99);
  EXPECT_EQ(a1->holder.load(), 0u);
  EXPECT_EQ(a0->waiter.load(), 0u);  // all-zero: nobody waits for it
  EXPECT_EQ(a0->waiter_seen_ns.load(), 0);
  a0->waiter.store(8);
  a0->waiter_seen_ns.store(100);
  EXPECT_EQ(b0->waiter.load(), 8u);
  EXPECT_EQ(b0->waiter_seen_ns.load(), 100);
  EXPECT_EQ(p0->heartbeat_ns[0].load(), 0);  // and it does not overlap the heartbeats
}

TEST(BoardTest, ProcessesClaimingTheSameUuidAtOnceShareOneEntry) {
  TempDir dir;
  const std::string path = dir.File("board");
  constexpr int kChildren = 8;
  pid_t pids[kChildren];
  for (int i = 0; i < kChildren; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      LedgerStatus status;
      std::unique_ptr<Board> board = Board::Open(path, &status);
      std::string error;
      compute::PriorityBoard* entry = board ? board->Lookup("GPU-race", &error) : nullptr;
      if (entry == nullptr) _exit(2);
      entry->heartbeat_ns[1].fetch_add(1);
      _exit(0);
    }
  }
  for (pid_t pid : pids) EXPECT_EQ(testing::WaitChild(pid, 10'000), 0);
  std::unique_ptr<Board> board = MustOpenBoard(path);
  std::string error;
  EXPECT_EQ(board->Lookup("GPU-race", &error)->heartbeat_ns[1].load(), kChildren);
}

TEST(BoardTest, RefusesFilesThatAreNotABoard) {
  TempDir dir;
  ASSERT_NE(MustOpenBoard(dir.File("good")), nullptr);
  const std::string good = testing::ReadBytes(dir.File("good"));
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::string bad_version = good;
  bad_version[8] = 7;
  Case cases[] = {{"magic", bad_magic, "bad magic"},
                  {"version", bad_version, "layout version 7"},
                  {"truncated", good.substr(0, 100), "size 100 bytes"}};
  for (const Case& c : cases) {
    const std::string path = dir.File(c.name);
    testing::WriteBytes(path, c.bytes);
    LedgerStatus status;
    EXPECT_EQ(Board::Open(path, &status), nullptr) << c.name;
    EXPECT_FALSE(status.ok);
    EXPECT_NE(status.message.find(path), std::string::npos) << status.message;
    EXPECT_NE(status.message.find(c.expect), std::string::npos) << status.message;
  }
  ASSERT_EQ(mkdir(dir.File("dir").c_str(), 0700), 0);
  LedgerStatus status;
  EXPECT_EQ(Board::Open(dir.File("dir"), &status), nullptr);
  EXPECT_FALSE(status.ok);
  ASSERT_EQ(symlink(dir.File("good").c_str(), dir.File("link").c_str()), 0);
  EXPECT_EQ(Board::Open(dir.File("link"), &status), nullptr);
  EXPECT_FALSE(status.ok);
}

TEST(BoardTest, BadUuidsAndAFullBoardAreErrors) {
  TempDir dir;
  std::unique_ptr<Board> board = MustOpenBoard(dir.File("board"));
  std::string error;
  EXPECT_EQ(board->Lookup("", &error), nullptr);
  EXPECT_NE(error.find("empty"), std::string::npos);
  EXPECT_EQ(board->Lookup(std::string(64, 'x'), &error), nullptr);
  for (int i = 0; i < kBoardMaxGpus; ++i) {
    ASSERT_NE(board->Lookup("GPU-" + std::to_string(i), &error), nullptr) << error;
  }
  EXPECT_EQ(board->Lookup("GPU-one-too-many", &error), nullptr);
  EXPECT_NE(error.find("full"), std::string::npos) << error;
  EXPECT_NE(board->Lookup("GPU-7", &error), nullptr);  // listed ones still resolve
}

}  // namespace
}  // namespace vgpu::ledger
