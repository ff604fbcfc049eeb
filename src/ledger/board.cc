#include "ledger/board.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "ledger/ledger_internal.h"

namespace vgpu::ledger {
namespace {

constexpr char kBoardMagic[8] = {'V', 'G', 'P', 'U', 'B', 'R', 'D', '\0'};
constexpr uint32_t kBoardLayoutVersion = 1;
constexpr size_t kBoardUuidBytes = 64;
constexpr int64_t kFlockTimeoutNs = 2'000'000'000;

enum EntryState : uint32_t { kEntryFree = 0, kEntryClaiming = 1, kEntryReady = 2 };

struct BoardHeader {
  char magic[8];             //  0
  uint32_t layout_version;   //  8
  uint32_t header_size;      // 12
  uint32_t max_gpus;         // 16
  uint32_t entry_size;       // 20
  uint64_t total_size;       // 24
  unsigned char reserved[32];// 32
};

struct alignas(64) BoardEntry {
  std::atomic<uint32_t> state;      //   0 EntryState
  uint32_t reserved0;               //   4
  char uuid[kBoardUuidBytes];       //   8 written before state becomes kEntryReady
  unsigned char reserved1[24];      //  72
  compute::GpuTurn turn;            //  96 (reserved zero bytes in the first libraries: all-zero is
                                    //      "nobody holds the turn, nobody waits", so the layout
                                    //      version stays 1)
  compute::PriorityBoard board;     // 128
};

struct BoardFile {
  BoardHeader header;
  BoardEntry entries[kBoardMaxGpus];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<BoardHeader> && std::is_standard_layout_v<BoardEntry>);
static_assert(sizeof(BoardHeader) == 64);
static_assert(offsetof(BoardHeader, layout_version) == 8 && offsetof(BoardHeader, max_gpus) == 16);
static_assert(offsetof(BoardHeader, entry_size) == 20 && offsetof(BoardHeader, total_size) == 24);
static_assert(sizeof(BoardEntry) == 192);
static_assert(offsetof(BoardEntry, uuid) == 8 && offsetof(BoardEntry, board) == 128);
static_assert(offsetof(BoardEntry, turn) == 96);
static_assert(offsetof(BoardFile, entries) == 64);
static_assert(sizeof(BoardFile) == 64 + 192 * kBoardMaxGpus);

std::string Problem(const std::string& path, const std::string& what) { return "board " + path + ": " + what; }

// Under the flock: initialises an empty file, or checks an existing one.
std::string InitOrCheck(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Problem(path, std::string("cannot stat: ") + strerror(errno));
  if (!S_ISREG(st.st_mode)) return Problem(path, "not a regular file; refused");
  if (st.st_size == 0) {
    BoardHeader header{};
    memcpy(header.magic, kBoardMagic, sizeof(header.magic));
    header.layout_version = kBoardLayoutVersion;
    header.header_size = sizeof(BoardHeader);
    header.max_gpus = kBoardMaxGpus;
    header.entry_size = sizeof(BoardEntry);
    header.total_size = sizeof(BoardFile);
    if (ftruncate(fd, sizeof(BoardFile)) != 0) return Problem(path, std::string("cannot size: ") + strerror(errno));
    if (pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
      return Problem(path, std::string("cannot write the header: ") + strerror(errno));
    }
    return "";
  }
  if (static_cast<uint64_t>(st.st_size) != sizeof(BoardFile)) {
    return Problem(path, "size " + std::to_string(st.st_size) + " bytes, expected " +
                             std::to_string(sizeof(BoardFile)) + " (truncated, or not a vgpu board)");
  }
  BoardHeader header{};
  if (pread(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return Problem(path, "cannot read the header");
  }
  if (memcmp(header.magic, kBoardMagic, sizeof(kBoardMagic)) != 0) return Problem(path, "not a vgpu board (bad magic)");
  if (header.layout_version != kBoardLayoutVersion) {
    return Problem(path, "layout version " + std::to_string(header.layout_version) + ", this library reads " +
                             std::to_string(kBoardLayoutVersion));
  }
  if (header.header_size != sizeof(BoardHeader) || header.max_gpus != kBoardMaxGpus ||
      header.entry_size != sizeof(BoardEntry) || header.total_size != sizeof(BoardFile)) {
    return Problem(path, "header sizes do not match layout version 1 (corrupt)");
  }
  return "";
}

}  // namespace

std::unique_ptr<Board> Board::Open(const std::string& path, LedgerStatus* status) {
  *status = LedgerStatus::Ok();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    *status = LedgerStatus::Error(Problem(path, std::string("cannot open: ") + strerror(errno)));
    return nullptr;
  }
  if (!internal::TakeFlock(fd, kFlockTimeoutNs)) {
    *status = LedgerStatus::Error(Problem(path, "cannot lock (flock timed out)"));
    close(fd);
    return nullptr;
  }
  struct stat st;
  // Created just now by us (empty and ours): make it shared whatever the umask.
  if (fstat(fd, &st) == 0 && st.st_size == 0 && st.st_uid == geteuid()) fchmod(fd, 0666);
  std::string problem = InitOrCheck(fd, path);
  flock(fd, LOCK_UN);
  if (!problem.empty()) {
    *status = LedgerStatus::Error(problem);
    close(fd);
    return nullptr;
  }
  void* map = mmap(nullptr, sizeof(BoardFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    *status = LedgerStatus::Error(Problem(path, std::string("cannot map: ") + strerror(errno)));
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<Board>(new Board(path, fd, map));
}

Board::Board(std::string path, int fd, void* map) : path_(std::move(path)), fd_(fd), map_(map) {}

Board::~Board() {
  munmap(map_, sizeof(BoardFile));
  close(fd_);
}

compute::PriorityBoard* Board::Lookup(const std::string& uuid, std::string* error, compute::GpuTurn** turn) {
  if (uuid.empty() || uuid.size() >= kBoardUuidBytes) {
    *error = Problem(path_, "GPU uuid '" + uuid + "' is empty or longer than 63 characters");
    return nullptr;
  }
  auto* file = static_cast<BoardFile*>(map_);
  auto found = [&](BoardEntry& e) {
    if (turn != nullptr) *turn = &e.turn;
    return &e.board;
  };
  auto find = [&]() -> compute::PriorityBoard* {
    for (BoardEntry& e : file->entries) {
      if (e.state.load(std::memory_order_acquire) == kEntryReady &&
          strncmp(e.uuid, uuid.c_str(), kBoardUuidBytes) == 0) {
        return found(e);
      }
    }
    return nullptr;
  };
  if (compute::PriorityBoard* existing = find()) return existing;
  if (!internal::TakeFlock(fd_, kFlockTimeoutNs)) {
    *error = Problem(path_, "cannot lock (flock timed out)");
    return nullptr;
  }
  compute::PriorityBoard* result = find();  // another process may have claimed it meanwhile
  for (BoardEntry& e : file->entries) {
    if (result != nullptr) break;
    // A claim interrupted by a crash (state 1) is taken over: claims only happen under the flock.
    if (e.state.load(std::memory_order_acquire) == kEntryReady) continue;
    e.state.store(kEntryClaiming, std::memory_order_relaxed);
    memset(e.uuid, 0, sizeof(e.uuid));
    memcpy(e.uuid, uuid.data(), uuid.size());
    e.state.store(kEntryReady, std::memory_order_release);
    result = found(e);
  }
  flock(fd_, LOCK_UN);
  if (result == nullptr) *error = Problem(path_, "full: " + std::to_string(kBoardMaxGpus) + " GPUs already listed");
  return result;
}

}  // namespace vgpu::ledger
