// Private definitions of two glibc functions that the static libstdc++ and libgcc pull into
// libvgpu.so when it is built on a recent glibc:
//   arc4random        (GLIBC_2.36) from libstdc++'s std::random_device, reached through its
//                     exception classes; the library never constructs a random_device.
//   _dl_find_object   (GLIBC_2.35) from libgcc's unwinder (unwind-dw2-fde-dip.c), which finds
//                     the .eh_frame_hdr of the object containing a PC while unwinding.
// Referenced from glibc, they made the library require glibc 2.36, and the dynamic linker
// refuses to preload it into a container with an older glibc (Ubuntu 22.04 has 2.35): the
// container would run without limits. Defined here (hidden, like every symbol of the library
// but the CUDA / NVML exports), the references bind inside the library and the highest glibc
// version it requires is 2.34 (tests/preload: LibraryNeedsNoGlibcNewerThan234).
//
// Only the references that the build's glibc makes possible are replaced: with an older glibc at
// build time, libstdc++ and libgcc do not reference these functions and nothing is defined.
#include <dlfcn.h>
#include <link.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 36))
extern "C" uint32_t arc4random(void) {
  uint32_t value = 0;
  for (;;) {
    const ssize_t got = getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) abort();  // as glibc: arc4random cannot fail
  }
}
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
namespace {

struct Search {
  uintptr_t pc;
  dl_find_object* result;
  bool found = false;
};

// Fills the result for the loaded object whose PT_LOAD segments contain the PC: the span of its
// mappings and its PT_GNU_EH_FRAME (.eh_frame_hdr), which is what the unwinder reads.
int Visit(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  bool contains = false;
  uintptr_t start = UINTPTR_MAX, end = 0;
  void* eh_frame = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      if (search->pc >= begin && search->pc < begin + ph.p_memsz) contains = true;
      if (begin < start) start = begin;
      if (begin + ph.p_memsz > end) end = begin + ph.p_memsz;
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<void*>(begin);
    }
  }
  if (!contains) return 0;
  dl_find_object* r = search->result;
  r->dlfo_flags = 0;
  r->dlfo_map_start = reinterpret_cast<void*>(start);
  r->dlfo_map_end = reinterpret_cast<void*>(end);
  r->dlfo_link_map = nullptr;  // the unwinder does not read it
  r->dlfo_eh_frame = eh_frame;
  search->found = true;
  return 1;
}

}  // namespace

extern "C" int _dl_find_object(void* address, dl_find_object* result) noexcept {
  Search search{reinterpret_cast<uintptr_t>(address), result};
  dl_iterate_phdr(Visit, &search);
  return search.found ? 0 : -1;
}
#endif
