#include "compute/trace.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace vgpu::compute {

// new Record[] without () leaves the records uninitialised: their pages are touched only as
// records are added. Without the memory, every record is dropped (and counted).
ComputeTrace::ComputeTrace(size_t capacity)
    : records_(new (std::nothrow) Record[capacity]), capacity_(records_ != nullptr ? capacity : 0) {}

void ComputeTrace::Add(Kind kind, int device, int64_t a, int64_t b, int64_t c) {
  const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= capacity_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  records_[i] = Record{a, b, c, device, kind};
}

size_t ComputeTrace::records() const {
  const size_t n = next_.load(std::memory_order_relaxed);
  return n < capacity_ ? n : capacity_;
}

bool ComputeTrace::WriteTo(const std::string& path, std::string* error) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  const size_t n = records();
  std::fprintf(f, "# vgpu compute trace 1: %zu records, %llu dropped\n", n,
               static_cast<unsigned long long>(dropped()));
  for (size_t i = 0; i < n; ++i) {
    const Record& r = records_[i];
    if (r.kind == kCharge || r.kind == kSync) {
      std::fprintf(f, "%c %d %lld %lld %lld\n", r.kind, r.device, static_cast<long long>(r.a),
                   static_cast<long long>(r.b), static_cast<long long>(r.c));
    } else {
      std::fprintf(f, "%c %d %lld %lld\n", r.kind, r.device, static_cast<long long>(r.a), static_cast<long long>(r.b));
    }
  }
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  if (std::fclose(f) != 0 || !ok) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string TracePath(const std::string& pattern, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace vgpu::compute
