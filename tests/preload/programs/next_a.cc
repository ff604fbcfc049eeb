// Helper library A for the RTLD_NEXT test: defines vgpu_test_symbol (returns 1) and looks up the
// next definition, which must be library B's.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) int vgpu_test_symbol() { return 1; }

// RTLD_NEXT is relative to the object that calls dlsym, so this call must not become a tail
// jump (which would make the caller's caller the reference point): the volatile store below
// keeps it a real call from this library.
extern "C" __attribute__((visibility("default"))) void* vgpu_test_lookup_next() {
  void* volatile next = dlsym(RTLD_NEXT, "vgpu_test_symbol");
  return next;
}
