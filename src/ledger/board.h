// The node-wide compute board: one small memory-mapped file shared by every container on a node
// (the node daemon creates it and mounts it into each container; `vgpu run` jobs share a per-host
// default). It holds one compute::PriorityBoard per physical GPU, keyed by GPU UUID, so that a
// low-priority container sees when a higher-priority one is active on the same GPU, and beside it
// the GPU's compute::GpuTurn, through which limited containers take turns (docs/compute.md,
// "Priority" and "Turns"; the format is in docs/ledger.md, "The board file").
//
// Format (layout version 1), native byte order, pinned by static_asserts in board.cc:
//   Header (64 bytes): magic "VGPUBRD\0", u32 layout_version, u32 header_size, u32 max_gpus,
//   u32 entry_size, u64 total_size, reserved zero.
//   Entry[kBoardMaxGpus] (192 bytes each): atomic u32 state (0 free, 1 being claimed, 2 ready),
//   u32 reserved, char uuid[64] (NUL-padded), reserved, the GpuTurn (32 bytes) at 96, then the
//   PriorityBoard at 128 (64-byte aligned).
// All-zero entries are free and a zero PriorityBoard is a valid initial state. Entries are
// claimed under flock(2) on the file (once per GPU per process, never on a hot path); the
// heartbeats themselves are lock-free atomics.
//
// Trust: the file is writable by every container on the node (mode 0666), so a process can make
// others yield by writing fake heartbeats (or, through a forged turn, make them wait at most
// max_turn_wait_ns per burst, or a period with runs, and hold back a run by at most max_yield_ns).
// It carries scheduling hints only: limits and accounting never depend on it (docs/compute.md
// states this threat).
//
// Thread safety: Open and Lookup may be called from any thread; the returned PriorityBoard is
// valid for the life of the Board object.
#pragma once

#include <memory>
#include <string>

#include "compute/compute_state.h"
#include "ledger/ledger.h"

namespace vgpu::ledger {

inline constexpr int kBoardMaxGpus = 64;

// The board path of `vgpu run` jobs and of containers whose daemon did not set VGPU_BOARD.
inline constexpr const char* kDefaultBoardPath = "/dev/shm/vgpu-board";

class Board {
 public:
  // Opens the board at `path`, creating it (mode 0666, umask-independent) when absent. A file
  // that is not a regular file, has another magic, version or size is refused with an error
  // naming the path; so is a symlink.
  static std::unique_ptr<Board> Open(const std::string& path, LedgerStatus* status);

  ~Board();
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  // The PriorityBoard of the GPU with this UUID, claiming a free entry on first use (and, when
  // `turn` is given, its GpuTurn in *turn). nullptr (with *error set) for an empty or over-long
  // uuid, a full board, or a lock failure.
  compute::PriorityBoard* Lookup(const std::string& uuid, std::string* error, compute::GpuTurn** turn = nullptr);

  const std::string& path() const { return path_; }

 private:
  Board(std::string path, int fd, void* map);
  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
};

}  // namespace vgpu::ledger
