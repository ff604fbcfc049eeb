// The file format: creation, modes, refusals, every corruption class, truncation, a bounded
// fuzz, boot changes, read-only access and the creation race.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "ledger/ledger.h"
#include "ledger/ledger_format.h"
#include "ledger/ledger_internal.h"
#include "ledger/ledger_test_util.h"

namespace vgpu::ledger {
namespace {

using format::DeviceRecord;
using format::File;
using format::Header;
using format::ProcessSlot;
using testing::kGiB;
using testing::kMiB;
using testing::TempDir;

constexpr size_t kDevice0 = offsetof(File, devices);
constexpr size_t kSlot0 = offsetof(File, slots);
constexpr size_t kSlot1 = kSlot0 + sizeof(ProcessSlot);

template <typename T>
void Put(std::string* bytes, size_t offset, T value) {
  memcpy(bytes->data() + offset, &value, sizeof(T));
}

class LedgerFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("ledger");
    LimitSet limits = testing::Uniform(kGiB);
    limits.default_host_limit = 2 * kGiB;
    std::unique_ptr<Ledger> ledger = testing::MustOpen(path_, limits);
    ASSERT_NE(ledger, nullptr);
    slot_ = testing::RegisterSelf(ledger.get());
    ASSERT_EQ(slot_, 0);
    std::string error;
    ASSERT_EQ(ledger->BindDevice(0, "GPU-aaaa", &error), 0) << error;
    ASSERT_EQ(ledger->BindDevice(1, "GPU-bbbb", &error), 1) << error;
    ASSERT_TRUE(ledger->TryReserve(slot_, 0, 10 * kMiB));
    ASSERT_TRUE(ledger->TryReserve(slot_, 1, 5 * kMiB));
    ledger->SetOverhead(slot_, 0, kMiB);
    ASSERT_TRUE(ledger->TrySpill(slot_, 0, 3 * kMiB));
    ledger.reset();
    valid_ = testing::ReadBytes(path_);
    ASSERT_EQ(valid_.size(), format::kFileSize);
  }

  // Writes `bytes` as a fresh private file and opens it for writing.
  LedgerStatus OpenBytes(const std::string& bytes, std::unique_ptr<Ledger>* out = nullptr) {
    const std::string path = dir_.File("case-" + std::to_string(++cases_));
    testing::WriteBytes(path, bytes);
    chmod(path.c_str(), 0600);
    last_path_ = path;
    LedgerStatus status;
    std::unique_ptr<Ledger> ledger = Ledger::Open(path, testing::Uniform(kGiB), &status, nullptr);
    EXPECT_EQ(status.ok, ledger != nullptr);
    if (out != nullptr) *out = std::move(ledger);
    return status;
  }

  // Expects Open to refuse `bytes` with a message naming the file and containing `problem`.
  void ExpectRefused(const std::string& bytes, const std::string& problem) {
    const LedgerStatus status = OpenBytes(bytes);
    EXPECT_FALSE(status.ok) << "accepted; wanted: " << problem;
    EXPECT_NE(status.message.find(last_path_), std::string::npos) << status.message;
    EXPECT_NE(status.message.find(problem), std::string::npos) << status.message;
  }

  TempDir dir_;
  std::string path_;
  std::string valid_;
  std::string last_path_;
  int slot_ = -1;
  int cases_ = 0;
};

TEST_F(LedgerFormatTest, ValidFileHasTheDocumentedHeader) {
  EXPECT_EQ(memcmp(valid_.data(), "VGPULDGR", 8), 0);
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  memcpy(&u32, valid_.data() + 8, 4);
  EXPECT_EQ(u32, 5u);
  memcpy(&u32, valid_.data() + 12, 4);
  EXPECT_EQ(u32, 512u);
  memcpy(&u64, valid_.data() + 16, 8);
  EXPECT_EQ(u64, 597504u);
  memcpy(&u64, valid_.data() + 56, 8);
  EXPECT_EQ(u64, 512u) << "devices_offset";
  memcpy(&u64, valid_.data() + 64, 8);
  EXPECT_EQ(u64, 3584u) << "slots_offset";
  memcpy(&u64, valid_.data() + 120, 8);
  EXPECT_EQ(u64, 462336u) << "compute_offset";
  memcpy(&u32, valid_.data() + 48, 4);
  EXPECT_EQ(u32, 192u) << "device_record_size";
  memcpy(&u32, valid_.data() + 52, 4);
  EXPECT_EQ(u32, 448u) << "process_slot_size";
  memcpy(&u64, valid_.data() + 24, 8);
  EXPECT_EQ(u64, format::kReadyValue);
  memcpy(&u32, valid_.data() + offsetof(Header, device_count), 4);
  EXPECT_EQ(u32, 2u);
  memcpy(&u64, valid_.data() + kDevice0 + offsetof(DeviceRecord, used), 8);
  EXPECT_EQ(u64, 11 * kMiB);
  EXPECT_STREQ(valid_.data() + kDevice0 + offsetof(DeviceRecord, uuid), "GPU-aaaa");
  memcpy(&u64, valid_.data() + kDevice0 + 128, 8);
  EXPECT_EQ(u64, 2 * kGiB) << "host_limit";
  memcpy(&u64, valid_.data() + kDevice0 + 136, 8);
  EXPECT_EQ(u64, 3 * kMiB) << "spilled";
  memcpy(&u64, valid_.data() + kSlot0 + 288, 8);
  EXPECT_EQ(u64, 3 * kMiB) << "slot 0 spilled[0]";
  memcpy(&u64, valid_.data() + 264, 8);
  EXPECT_EQ(u64, 2 * kGiB) << "default_host_limit";
  int32_t pid = 0;
  memcpy(&pid, valid_.data() + kSlot0 + offsetof(ProcessSlot, pid), 4);
  EXPECT_EQ(pid, getpid());
  EXPECT_EQ(OpenBytes(valid_).message, "");
}

TEST_F(LedgerFormatTest, ModesAreExactWhateverTheUmask) {
  const mode_t old = umask(0);
  EXPECT_TRUE(Ledger::WriteLimits(dir_.File("authority"), testing::Uniform(kGiB, Authority::kVgpuRun)).ok);
  testing::MustOpen(dir_.File("newdir/ledger"), testing::Uniform(kGiB));
  umask(077);
  EXPECT_TRUE(Ledger::WriteLimits(dir_.File("authority2"), testing::Uniform(kGiB, Authority::kVgpuRun)).ok);
  umask(old);
  EXPECT_EQ(testing::Mode(dir_.File("authority")), 0644);
  EXPECT_EQ(testing::Mode(dir_.File("authority2")), 0644);
  EXPECT_EQ(testing::Mode(dir_.File("newdir")), 0700);
  EXPECT_EQ(testing::Mode(dir_.File("newdir/ledger")), 0600);
  EXPECT_EQ(testing::Mode(path_), 0600);
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST_F(LedgerFormatTest, AuthorityNeedsAnExistingDirectory) {
  const LedgerStatus status = Ledger::WriteLimits(dir_.File("missing/ledger"), testing::Uniform(kGiB, Authority::kVgpuRun));
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("missing"), std::string::npos) << status.message;
}

TEST_F(LedgerFormatTest, RefusesSymlinksNonRegularFilesAndSharedWritableFiles) {
  const std::string link = dir_.File("link");
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  LedgerStatus status;
  EXPECT_EQ(Ledger::Open(link, testing::Uniform(kGiB), &status, nullptr), nullptr);
  EXPECT_NE(status.message.find("symbolic link"), std::string::npos) << status.message;
  EXPECT_EQ(Ledger::OpenReadOnly(link, &status), nullptr);
  EXPECT_NE(status.message.find("symbolic link"), std::string::npos) << status.message;
  EXPECT_FALSE(Ledger::WriteLimits(link, testing::Uniform(kGiB, Authority::kVgpuRun)).ok);
  // A dangling symlink must not be followed to create a file either.
  ASSERT_EQ(symlink(dir_.File("target").c_str(), dir_.File("dangling").c_str()), 0);
  EXPECT_EQ(Ledger::Open(dir_.File("dangling"), testing::Uniform(kGiB), &status, nullptr), nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir_.File("target")));

  ASSERT_EQ(mkfifo(dir_.File("fifo").c_str(), 0600), 0);
  EXPECT_EQ(Ledger::OpenReadOnly(dir_.File("fifo"), &status), nullptr);  // must not block
  EXPECT_NE(status.message.find("not a regular file"), std::string::npos) << status.message;
  EXPECT_EQ(Ledger::Open(dir_.path(), testing::Uniform(kGiB), &status, nullptr), nullptr);

  chmod(path_.c_str(), 0664);
  EXPECT_EQ(Ledger::Open(path_, testing::Uniform(kGiB), &status, nullptr), nullptr);
  EXPECT_NE(status.message.find("writable by group or others"), std::string::npos) << status.message;
  EXPECT_NE(Ledger::OpenReadOnly(path_, &status), nullptr) << status.message;  // reading is harmless
}

TEST_F(LedgerFormatTest, HeaderCorruptionIsReported) {
  std::string bytes = valid_;
  memcpy(bytes.data(), "NOTLEDGR", 8);
  ExpectRefused(bytes, "bad magic");
  for (const uint32_t version : {0u, 1u, 2u, 3u, 4u, 6u, 0xffffffffu}) {
    bytes = valid_;
    Put<uint32_t>(&bytes, offsetof(Header, layout_version), version);
    ExpectRefused(bytes, "layout version " + std::to_string(version) + " is not supported");
  }
  bytes = valid_;
  Put<uint32_t>(&bytes, offsetof(Header, header_size), 511);
  ExpectRefused(bytes, "header size 511");
  bytes = valid_;
  Put<uint64_t>(&bytes, offsetof(Header, total_size), 1u << 30);
  ExpectRefused(bytes, "total size 1073741824");
  bytes = valid_;
  Put<uint64_t>(&bytes, offsetof(Header, ready), 0);
  ExpectRefused(bytes, "not initialised");
  for (const size_t field : {offsetof(Header, max_devices), offsetof(Header, max_processes),
                             offsetof(Header, device_record_size), offsetof(Header, process_slot_size)}) {
    bytes = valid_;
    Put<uint32_t>(&bytes, field, 17);
    ExpectRefused(bytes, "table geometry");
  }
  bytes = valid_;
  Put<uint64_t>(&bytes, offsetof(Header, slots_offset), 0);
  ExpectRefused(bytes, "table geometry");
  bytes = valid_;
  Put<uint64_t>(&bytes, offsetof(Header, compute_offset), 0);
  ExpectRefused(bytes, "table geometry");
}

// Files of earlier layouts (version 1: 330240 bytes, no compute state; version 2: 332288 bytes,
// no spill fields; version 3: the size of 4, reserved fields where 4 has drain state, context
// sizes and the compute gate) are reported as a wrong version, never misread.
TEST_F(LedgerFormatTest, OlderVersionFilesAreRefusedAsWrongVersion) {
  struct Old {
    uint32_t version;
    uint64_t size;
    uint64_t compute_offset;  // reserved0 in version 1
  };
  for (const Old& old :
       {Old{1, 330240, 0}, Old{2, 332288, 330240}, Old{3, 464384, 462336}, Old{4, 464384, 462336}}) {
    std::string bytes = valid_.substr(0, old.size);
    Put<uint32_t>(&bytes, offsetof(Header, layout_version), old.version);
    if (old.version < 3) {
      Put<uint32_t>(&bytes, offsetof(Header, device_record_size), 128);
      Put<uint32_t>(&bytes, offsetof(Header, process_slot_size), 320);
      Put<uint64_t>(&bytes, offsetof(Header, slots_offset), 2560);
    }
    Put<uint64_t>(&bytes, offsetof(Header, total_size), old.size);
    Put<uint64_t>(&bytes, offsetof(Header, compute_offset), old.compute_offset);
    const std::string expected =
        "layout version " + std::to_string(old.version) + " is not supported (this build reads version 5)";
    ExpectRefused(bytes, expected);
    LedgerStatus status;
    EXPECT_EQ(Ledger::OpenReadOnly(last_path_, &status), nullptr);
    EXPECT_NE(status.message.find(expected), std::string::npos) << status.message;
  }
}

// The compute state lives in the mapping: two opens of one file share it; read-only has none.
TEST_F(LedgerFormatTest, ComputeStateIsSharedThroughTheFile) {
  LedgerStatus status;
  std::unique_ptr<Ledger> a = Ledger::Open(path_, testing::Uniform(kGiB), &status, nullptr);
  std::unique_ptr<Ledger> b = Ledger::Open(path_, testing::Uniform(kGiB), &status, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(a->ComputeState(1), nullptr);
  EXPECT_EQ(a->ComputeState(1)->vclock_ns.load(), 0) << "all-zero initial state";
  a->ComputeState(1)->vclock_ns.store(12345);
  EXPECT_EQ(b->ComputeState(1)->vclock_ns.load(), 12345);
  EXPECT_EQ(b->ComputeState(0)->vclock_ns.load(), 0);
  EXPECT_EQ(a->ComputeState(-1), nullptr);
  EXPECT_EQ(a->ComputeState(kLedgerMaxDevices), nullptr);
  a.reset();
  b.reset();
  std::unique_ptr<Ledger> ro = Ledger::OpenReadOnly(path_, &status);
  ASSERT_NE(ro, nullptr) << status.message;
  EXPECT_EQ(ro->ComputeState(0), nullptr);
  const std::string bytes = testing::ReadBytes(path_);
  int64_t stored = 0;
  memcpy(&stored, bytes.data() + offsetof(File, compute) + sizeof(compute::ComputeShareState), 8);
  EXPECT_EQ(stored, 12345) << "compute[1].vclock_ns at its documented offset";
}

TEST_F(LedgerFormatTest, ImpossibleValuesAreReported) {
  struct Case {
    size_t offset;
    uint64_t value;
    size_t width;
    const char* problem;
  };
  constexpr uint64_t kTooBig = (uint64_t{1} << 63) + 1;
  const Case cases[] = {
      {offsetof(Header, authority), 9, 4, "authority 9"},
      {offsetof(Header, device_count), 17, 4, "device count 17 exceeds the maximum 16"},
      {offsetof(Header, slot_high_water), 1025, 4, "high-water mark 1025"},
      {offsetof(Header, default_memory_limit), kTooBig, 8, "default memory limit"},
      {offsetof(Header, default_sm_limit), 101, 4, "not percentages"},
      {offsetof(Header, default_sm_soft_limit), static_cast<uint32_t>(-1), 4, "not percentages"},
      {offsetof(Header, task_priority), 101, 8, "task priority 101"},
      {kDevice0 + offsetof(DeviceRecord, ordinal), 99, 4, "ordinal 99 out of range"},
      {kDevice0 + offsetof(DeviceRecord, memory_limit), kTooBig, 8, "memory limit"},
      {kDevice0 + offsetof(DeviceRecord, sm_limit), 101, 8, "not percentages"},
      {kDevice0 + offsetof(DeviceRecord, used), kTooBig, 8, "is impossible (above 2^63)"},
      {kDevice0 + offsetof(DeviceRecord, used), 10 * kMiB, 8, "differs from what its processes hold"},
      {kDevice0 + offsetof(DeviceRecord, peak), kMiB, 8, "is below used"},
      {kDevice0 + offsetof(DeviceRecord, oom_refusals), kTooBig, 8, "refusal count is impossible"},
      {offsetof(Header, default_host_limit), kTooBig, 8, "default host spill limit"},
      {kDevice0 + offsetof(DeviceRecord, host_limit), kTooBig, 8, "host spill limit"},
      {kDevice0 + offsetof(DeviceRecord, spilled), kTooBig, 8, "spilled 9223372036854775809 is impossible"},
      {kDevice0 + offsetof(DeviceRecord, spilled), kMiB, 8, "differs from what its processes spilled"},
      {kDevice0 + offsetof(DeviceRecord, spill_peak), kMiB, 8, "spill peak 1048576 is below spilled"},
      {kDevice0 + offsetof(DeviceRecord, spill_refusals), kTooBig, 8, "spill refusal count is impossible"},
      {kDevice0 + 2 * sizeof(DeviceRecord) + offsetof(DeviceRecord, spilled), 1, 8, "unused device record 2"},
      {kSlot0 + offsetof(ProcessSlot, spilled), kTooBig, 8, "spill on device 0 is impossible"},
      {kSlot0 + offsetof(ProcessSlot, spilled) + 8 * 6, 1, 8, "charges device 6, which is not in the ledger"},
      {kSlot1 + offsetof(ProcessSlot, spilled), 1, 8, "free process slot 1 is not empty"},
      {kDevice0 + sizeof(DeviceRecord) + offsetof(DeviceRecord, ordinal), 0, 4, "ordinal 0 appears twice"},
      {kDevice0 + offsetof(DeviceRecord, uuid), 0x01, 1, "uuid is not a printable"},
      {kDevice0 + 2 * sizeof(DeviceRecord) + offsetof(DeviceRecord, used), 1, 8, "unused device record 2"},
      {kSlot0 + offsetof(ProcessSlot, state), 7, 4, "state 7 out of range"},
      {kSlot0 + offsetof(ProcessSlot, pid), 0, 4, "is impossible"},
      {kSlot0 + offsetof(ProcessSlot, pid), static_cast<uint32_t>(-5), 4, "is impossible"},
      {kSlot0 + offsetof(ProcessSlot, charged), kTooBig, 8, "charge on device 0 is impossible"},
      {kSlot0 + offsetof(ProcessSlot, charged) + 8 * 5, 1, 8, "charges device 5, which is not in the ledger"},
      {kSlot1 + offsetof(ProcessSlot, state), 1, 4, "above the high-water mark"},
      {kSlot1 + offsetof(ProcessSlot, pid), 123, 4, "free process slot 1 is not empty"},
      {kSlot1 + offsetof(ProcessSlot, overhead), 1, 8, "free process slot 1 is not empty"},
      {kSlot1 + offsetof(ProcessSlot, drain_since_ns), 1, 8, "free process slot 1 is not empty"},
      {kSlot0 + offsetof(ProcessSlot, drain_since_ns), 5, 8, "is active but has drain fields"},
      {kSlot0 + offsetof(ProcessSlot, drain_confirmed), 1, 4, "is active but has drain fields"},
      {kDevice0 + offsetof(DeviceRecord, context_bytes), kTooBig, 8, "context size"},
  };
  for (const Case& c : cases) {
    std::string bytes = valid_;
    memcpy(bytes.data() + c.offset, &c.value, c.width);
    SCOPED_TRACE(c.problem);
    ExpectRefused(bytes, c.problem);
  }
  // Every device record name: a record with neither an ordinal nor a uuid.
  std::string bytes = valid_;
  Put<int32_t>(&bytes, kDevice0 + offsetof(DeviceRecord, ordinal), -1);
  memset(bytes.data() + kDevice0 + offsetof(DeviceRecord, uuid), 0, format::kUuidBytes);
  ExpectRefused(bytes, "neither an ordinal nor a uuid");
}

TEST_F(LedgerFormatTest, EveryTruncationLengthClassIsReported) {
  struct Case {
    uint64_t length;
    const char* problem;
  };
  const Case cases[] = {
      {0, "truncated: 0 bytes"},       {1, "truncated: 1 bytes"},        {7, "truncated"},
      {8, "truncated: 8 bytes"},       {11, "truncated"},                {12, "shorter than the header"},
      {200, "shorter than the header"}, {511, "shorter than the header"}, {512, "truncated: 512 of 597504"},
      {3584, "truncated: 3584 of"},    {100000, "truncated: 100000 of"}, {462335, "truncated: 462335 of"},
      {462336, "truncated: 462336 of 597504"}, {597503, "truncated: 597503 of 597504"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.length);
    ExpectRefused(valid_.substr(0, c.length), c.problem);
    LedgerStatus status;
    EXPECT_EQ(Ledger::OpenReadOnly(last_path_, &status), nullptr);
    EXPECT_NE(status.message.find(c.problem), std::string::npos) << status.message;
  }
  ExpectRefused(valid_ + "x", "wrong size: 597505 bytes");
  ExpectRefused(std::string(format::kFileSize, '\0'), "bad magic");
  // A huge sparse file is refused without being read.
  const std::string huge = dir_.File("huge");
  const int fd = open(huge.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, valid_.data(), valid_.size(), 0), static_cast<ssize_t>(valid_.size()));
  ASSERT_EQ(ftruncate(fd, off_t{1} << 30), 0);
  close(fd);
  LedgerStatus status;
  EXPECT_EQ(Ledger::Open(huge, testing::Uniform(kGiB), &status, nullptr), nullptr);
  EXPECT_NE(status.message.find("wrong size"), std::string::npos) << status.message;
  EXPECT_EQ(Ledger::OpenReadOnly(huge, &status), nullptr);
  EXPECT_NE(status.message.find("wrong size"), std::string::npos) << status.message;
}

// The consistency a successfully opened ledger must have, whatever its bytes were.
void ExpectConsistent(const Ledger& ledger) {
  const Snapshot snapshot = ledger.Read();
  ASSERT_LE(snapshot.devices.size(), static_cast<size_t>(kLedgerMaxDevices));
  for (const DeviceUsage& device : snapshot.devices) {
    unsigned __int128 sum = 0;
    unsigned __int128 spilled = 0;
    for (const ProcessUsage& process : snapshot.processes) {
      sum += process.charged[device.index] + process.overhead[device.index];
      spilled += process.spilled[device.index];
    }
    EXPECT_EQ(sum, device.used) << "device " << device.index;
    EXPECT_EQ(spilled, device.spilled) << "device " << device.index;
    EXPECT_GE(device.spill_peak, device.spilled);
    EXPECT_EQ(ledger.HostLimit(device.index), device.host_limit);
    EXPECT_LE(device.used, uint64_t{1} << 63);
    EXPECT_GE(device.peak, device.used);
    EXPECT_EQ(ledger.MemoryLimit(device.index), device.memory_limit);
    EXPECT_LE(device.sm_limit, 100);
  }
  for (const ProcessUsage& process : snapshot.processes) EXPECT_GT(process.pid, 0);
  EXPECT_TRUE(ledger.Health().ok) << ledger.Health().message;
}

// Half the mutations hit the header, device table and the first slots, where the interesting
// fields are; the rest hit anywhere. The mutex is not fuzzed (it belongs to the C library; a
// corrupt one is detected by the lock timeout, see docs/ledger.md).
size_t FuzzOffset(std::mt19937_64& random, size_t align) {
  size_t offset;
  do {
    offset = random() % 2 ? random() % (kSlot0 + 2 * sizeof(ProcessSlot)) : random() % format::kFileSize;
    offset -= offset % align;
  } while (offset + 8 > format::kFileSize || (offset + 8 > offsetof(Header, mutex) && offset < offsetof(Header, authority)));
  return offset;
}

// One to three bit flips, random words, interesting values or a new length.
void Mutate(std::mt19937_64& random, std::string* bytes) {
  static constexpr uint64_t kInteresting[] = {0, 1, 2, 16, 17, 100, 101, 1023, 1024, 1025, uint64_t{1} << 63,
                                              (uint64_t{1} << 63) + 1, ~uint64_t{0}, 0xffffffffu};
  size_t resize_to = bytes->size();
  const int mutations = 1 + static_cast<int>(random() % 3);
  for (int m = 0; m < mutations; ++m) {
    switch (random() % 8) {
      case 0: case 1: case 2: {
        const size_t offset = FuzzOffset(random, 1);
        (*bytes)[offset] = static_cast<char>((*bytes)[offset] ^ (1 << (random() % 8)));
        break;
      }
      case 3: case 4: Put<uint64_t>(bytes, FuzzOffset(random, 8), random()); break;
      case 5: case 6: {
        const uint64_t value = kInteresting[random() % std::size(kInteresting)];
        if (random() % 2) Put<uint64_t>(bytes, FuzzOffset(random, 8), value);
        else Put<uint32_t>(bytes, FuzzOffset(random, 4), static_cast<uint32_t>(value));
        break;
      }
      default:
        if (random() % 4 == 0) resize_to = random() % (format::kFileSize + 16);
        break;
    }
  }
  bytes->resize(resize_to, '\0');
}

// Rewritten in place (no O_TRUNC): freeing and refaulting the page cache every time would
// dominate the run time.
bool RewriteInPlace(const std::string& path, const std::string& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()) &&
                  ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  close(fd);
  return ok;
}

TEST_F(LedgerFormatTest, BoundedFuzzNeverCrashesAndYieldsOnlyConsistentLedgers) {
  constexpr int kIterations = 20000;
  std::mt19937_64 random(20240611);
  const std::string path = dir_.File("fuzz");
  int opened = 0;
  int refused = 0;
  for (int i = 0; i < kIterations; ++i) {
    std::string bytes = valid_;
    Mutate(random, &bytes);
    ASSERT_TRUE(RewriteInPlace(path, bytes));
    LedgerStatus status;
    std::unique_ptr<Ledger> ledger = Ledger::Open(path, testing::Uniform(kGiB), &status, nullptr);
    ASSERT_EQ(status.ok, ledger != nullptr) << i;
    if (ledger == nullptr) {
      ++refused;
      ASSERT_NE(status.message.find(path), std::string::npos) << status.message;
      continue;
    }
    ++opened;
    ExpectConsistent(*ledger);
    if (::testing::Test::HasFailure()) FAIL() << "iteration " << i;
  }
  EXPECT_GT(opened, kIterations / 20);
  EXPECT_GT(refused, kIterations / 4);
  std::cout << "fuzz: " << opened << " opened consistently, " << refused << " refused\n";
}

TEST_F(LedgerFormatTest, ALedgerFromAnotherBootStartsWithNoProcesses) {
  std::string bytes = valid_;
  memcpy(bytes.data() + offsetof(Header, boot_id), "00000000-0000-0000-0000-000000000000", 36);
  memset(bytes.data() + offsetof(Header, mutex), 0x5a, format::kMutexBytes);  // a stale lock word
  Put<int64_t>(&bytes, offsetof(File, compute), int64_t{1} << 60);  // a budget clock of that boot
  std::unique_ptr<Ledger> ledger;
  ASSERT_TRUE(OpenBytes(bytes, &ledger).ok);
  EXPECT_EQ(ledger->ComputeState(0)->vclock_ns.load(), 0) << "old-boot monotonic times are dropped";
  EXPECT_EQ(ledger->DeviceUsed(0), 0u);
  EXPECT_EQ(ledger->DeviceUsed(1), 0u);
  const Snapshot snapshot = ledger->Read();
  EXPECT_TRUE(snapshot.processes.empty());
  EXPECT_EQ(snapshot.reclaimed_processes, 1u);
  EXPECT_EQ(snapshot.devices.size(), 2u);           // bindings and limits survive
  EXPECT_EQ(snapshot.devices[0].peak, 11 * kMiB);   // and so does history
  const int slot = testing::RegisterSelf(ledger.get());
  EXPECT_TRUE(ledger->TryReserve(slot, 0, kMiB));   // the re-initialised lock works
  EXPECT_EQ(internal::FixedString(testing::ReadBytes(last_path_).data() + offsetof(Header, boot_id), 48),
            internal::CurrentBootId());
}

TEST_F(LedgerFormatTest, ReadOnlyNeverWritesAndSurvivesTruncation) {
  struct stat before;
  ASSERT_EQ(stat(path_.c_str(), &before), 0);
  chmod(path_.c_str(), 0400);
  LedgerStatus status;
  std::unique_ptr<Ledger> ledger = Ledger::OpenReadOnly(path_, &status);
  ASSERT_NE(ledger, nullptr) << status.message;
  EXPECT_TRUE(ledger->read_only());
  const Snapshot snapshot = ledger->Read();
  ASSERT_EQ(snapshot.devices.size(), 2u);
  EXPECT_EQ(snapshot.devices[0].used, 11 * kMiB);
  EXPECT_EQ(snapshot.devices[0].uuid, "GPU-aaaa");
  ASSERT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.processes[0].pid, getpid());
  EXPECT_TRUE(snapshot.processes[0].alive);
  EXPECT_EQ(ledger->RegisterProcess(getpid(), getpid(), 1), -1);
  EXPECT_FALSE(ledger->TryReserve(0, 0, 1));
  std::string error;
  EXPECT_EQ(ledger->BindDevice(2, "GPU-cccc", &error), -1);
  EXPECT_NE(error.find("read-only"), std::string::npos);
  EXPECT_EQ(testing::ReadBytes(path_), valid_);
  struct stat after;
  ASSERT_EQ(stat(path_.c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);

  chmod(path_.c_str(), 0600);
  ASSERT_EQ(truncate(path_.c_str(), 1000), 0);  // a writer could not survive this; a reader must
  EXPECT_TRUE(ledger->Read().devices.empty());
  EXPECT_FALSE(ledger->Health().ok);
  EXPECT_NE(ledger->Health().message.find("truncated"), std::string::npos) << ledger->Health().message;
}

TEST_F(LedgerFormatTest, ConcurrentCreatorsAgreeOnOneCompleteFile) {
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir_.File("race-" + std::to_string(round));
    int gate[2];
    ASSERT_EQ(pipe(gate), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < 8; ++i) {
      const pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        close(gate[1]);
        char c;
        (void)!read(gate[0], &c, 1);  // released when the parent closes its end
        if (i % 2 == 0) {
          _exit(Ledger::WriteLimits(path, testing::Uniform(2 * kGiB, Authority::kVgpuRun)).ok ? 0 : 1);
        }
        LedgerStatus status;
        std::unique_ptr<Ledger> ledger = Ledger::Open(path, testing::Uniform(kGiB), &status, nullptr);
        _exit(ledger != nullptr ? 0 : 2);
      }
      children.push_back(child);
    }
    close(gate[0]);
    close(gate[1]);
    for (const pid_t child : children) {
      const int status = testing::WaitChild(child, 10000);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << " status " << status;
    }
    LedgerStatus status;
    std::unique_ptr<Ledger> ledger = Ledger::OpenReadOnly(path, &status);
    ASSERT_NE(ledger, nullptr) << status.message;
    const LimitSet limits = ledger->Limits();
    EXPECT_EQ(limits.authority, Authority::kVgpuRun);  // the authority wins whoever came first
    EXPECT_EQ(limits.default_memory_limit, 2 * kGiB);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST(LedgerProcessTest, StartTimeAndLiveness) {
  const uint64_t start = ProcessStartTime(getpid());
  EXPECT_GT(start, 0u);
  EXPECT_EQ(ProcessStartTime(getpid()), start);
  EXPECT_EQ(ProcessStartTime(0), 0u);
  EXPECT_EQ(ProcessStartTime(-1), 0u);
  EXPECT_EQ(ProcessStartTime(4194304 + 1), 0u);  // above the largest pid_max
  EXPECT_TRUE(IsProcessAlive(getpid(), start));
  EXPECT_TRUE(IsProcessAlive(getpid(), 0));
  EXPECT_FALSE(IsProcessAlive(getpid(), start + 1));  // same pid, another process
  EXPECT_FALSE(IsProcessAlive(0, 0));
  EXPECT_FALSE(IsProcessAlive(-1, 0));
  EXPECT_FALSE(IsProcessAlive(4194304 + 1, 0));
  EXPECT_TRUE(IsProcessAlive(1, 0));  // init: alive even when kill() says EPERM

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  const uint64_t child_start = ProcessStartTime(child);  // may already be a zombie: still has stat
  // Until reaped the child is a zombie: dead for the ledger.
  for (int i = 0; i < 2000 && IsProcessAlive(child, child_start); ++i) usleep(1000);
  EXPECT_FALSE(IsProcessAlive(child, child_start));
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(IsProcessAlive(child, child_start));
}

TEST(LedgerProcessTest, ProcStatParsingSurvivesHostileCommandNames) {
  // comm may contain ") " sequences; the parser must anchor on the last ')'.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_NAME, "a) b (c) 1 2");
    pause();
    _exit(0);
  }
  usleep(100000);
  internal::ProcStat stat;
  EXPECT_TRUE(internal::ReadProcStat(child, &stat));
  EXPECT_GT(stat.start_time, 0u);
  EXPECT_EQ(stat.start_time, ProcessStartTime(child));
  EXPECT_TRUE(IsProcessAlive(child, stat.start_time));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(IsProcessAlive(child, stat.start_time));
}

TEST(LedgerPathTest, DefaultPathAndPrivateDirectories) {
  EXPECT_EQ(DefaultLedgerPath(), "/tmp/vgpu-" + std::to_string(geteuid()) + "/ledger");
  TempDir dir;
  EXPECT_TRUE(internal::EnsurePrivateDirectory(dir.File("fresh")).ok);
  EXPECT_EQ(testing::Mode(dir.File("fresh")), 0700);
  EXPECT_TRUE(internal::EnsurePrivateDirectory(dir.File("fresh")).ok);  // existing and private
  ASSERT_EQ(mkdir(dir.File("open").c_str(), 0700), 0);
  chmod(dir.File("open").c_str(), 0777);
  const LedgerStatus open = internal::EnsurePrivateDirectory(dir.File("open"));
  EXPECT_FALSE(open.ok);
  EXPECT_NE(open.message.find("writable by group or others"), std::string::npos) << open.message;
  ASSERT_EQ(symlink(dir.File("fresh").c_str(), dir.File("link").c_str()), 0);
  EXPECT_FALSE(internal::EnsurePrivateDirectory(dir.File("link")).ok);
  testing::WriteBytes(dir.File("file"), "x");
  EXPECT_FALSE(internal::EnsurePrivateDirectory(dir.File("file")).ok);
}

}  // namespace
}  // namespace vgpu::ledger
