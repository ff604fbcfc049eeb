// Loads libvgpu.so with dlopen() after start-up, as an application or a benchmark that loads it
// by hand does (bench/overhead_driver's "ab" mode), and reports the size of its TLS block.
// The library's thread-locals are initial-exec, so the whole block must fit in the static TLS
// surplus that glibc keeps for libraries loaded later (a few hundred bytes spare in practice);
// a large thread_local once made this dlopen fail with "cannot allocate memory in static TLS block".
//
// Usage: dlopen_library <path of libvgpu.so>
// Prints "tls <bytes>" and exits 0, or prints dlerror() and exits 1.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>

namespace {

struct Found {
  const char* path;
  long long tls = -1;
};

int FindTls(dl_phdr_info* info, size_t, void* data) {
  auto* found = static_cast<Found*>(data);
  if (info->dlpi_name == nullptr || std::strcmp(info->dlpi_name, found->path) != 0) return 0;
  found->tls = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_TLS) found->tls = static_cast<long long>(info->dlpi_phdr[i].p_memsz);
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dlopen_library <path of libvgpu.so>\n");
    return 2;
  }
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 1;
  }
  Found found{argv[1]};
  dl_iterate_phdr(FindTls, &found);
  std::printf("tls %lld\n", found.tls);
  return found.tls >= 0 ? 0 : 1;
}
