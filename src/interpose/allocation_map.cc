#include "interpose/allocation_map.h"

#include <mutex>
#include <new>
#include <unordered_map>

namespace vgpu::memory {
namespace {

constexpr int kShards = 64;

struct Key {
  uint64_t value;
  KeySpace space;
  bool operator==(const Key& o) const { return value == o.value && space == o.space; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t x = k.value ^ (static_cast<uint64_t>(k.space) << 59);
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ULL;
    return static_cast<size_t>(x ^ (x >> 29));
  }
};

struct Shard {
  std::mutex mu;
  std::unordered_map<Key, AllocRecord, KeyHash> records;  // guarded by mu
};

// Never destroyed: frees may arrive during exit, after static destructors.
alignas(Shard) unsigned char g_storage[sizeof(Shard) * kShards];
std::once_flag g_once;

Shard* Shards() {
  std::call_once(g_once, [] {
    for (int i = 0; i < kShards; ++i) new (g_storage + i * sizeof(Shard)) Shard();
  });
  return reinterpret_cast<Shard*>(g_storage);
}

Shard& ShardFor(const Key& key) { return Shards()[KeyHash()(key) % kShards]; }

}  // namespace

void Track(KeySpace space, uint64_t key, const AllocRecord& record) {
  const Key k{key, space};
  Shard& shard = ShardFor(k);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.records[k] = record;
}

std::optional<AllocRecord> Take(KeySpace space, uint64_t key) {
  const Key k{key, space};
  Shard& shard = ShardFor(k);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.records.find(k);
  if (it == shard.records.end()) return std::nullopt;
  AllocRecord record = it->second;
  shard.records.erase(it);
  return record;
}

std::optional<AllocRecord> Find(KeySpace space, uint64_t key) {
  const Key k{key, space};
  Shard& shard = ShardFor(k);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.records.find(k);
  if (it == shard.records.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> Adjust(KeySpace space, uint64_t key, int64_t delta) {
  const Key k{key, space};
  Shard& shard = ShardFor(k);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.records.find(k);
  if (it == shard.records.end()) return std::nullopt;
  it->second.bytes = static_cast<uint64_t>(static_cast<int64_t>(it->second.bytes) + delta);
  return it->second.bytes;
}

void ResetAfterFork() {
  // Another thread may have held a shard lock at fork(): rebuild every shard in place.
  Shard* shards = Shards();
  for (int i = 0; i < kShards; ++i) {
    new (&shards[i]) Shard();
  }
}

}  // namespace vgpu::memory
