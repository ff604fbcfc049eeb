// Layer 2 and the rules for everything that is not the driver:
//  - dlsym on a libcuda / libnvidia-ml handle gives vgpu's wrapper for hooked names (when vgpu is
//    loaded and in control), the driver's own function otherwise;
//  - RTLD_NEXT from a library still finds the next library's definition (vgpu's dlsym forwards
//    as a sibling call, so glibc sees the right caller);
//  - RTLD_DEFAULT and handles of other libraries are untouched; dlerror() still works.
// Usage: dlsym_lookup vgpu|driver
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

extern "C" int vgpu_test_symbol();
extern "C" void* vgpu_test_lookup_next();

namespace {

std::string ObjectOf(void* p) {
  Dl_info info{};
  CHECK(dladdr(p, &info) != 0 && info.dli_fname != nullptr);
  return info.dli_fname;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  const bool expect_vgpu = std::strcmp(argv[1], "vgpu") == 0;
  const char* hooked_object = expect_vgpu ? "libvgpu.so" : "libcuda.so.1";
  const char* hooked_nvml_object = expect_vgpu ? "libvgpu.so" : "libnvidia-ml.so.1";

  // RTLD_NEXT relative to library A finds library B; RTLD_DEFAULT finds A (link order).
  void* next = vgpu_test_lookup_next();
  CHECK(next != nullptr);
  CHECK(reinterpret_cast<int (*)()>(next)() == 2);
  void* first = dlsym(RTLD_DEFAULT, "vgpu_test_symbol");
  CHECK(first != nullptr && reinterpret_cast<int (*)()>(first)() == 1);
  CHECK(vgpu_test_symbol() == 1);

  // Another library's handle is untouched.
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  CHECK(libm != nullptr);
  auto cosine = reinterpret_cast<double (*)(double)>(dlsym(libm, "cos"));
  CHECK(cosine != nullptr && cosine(0.0) == 1.0);
  CHECK(EndsWith(ObjectOf(reinterpret_cast<void*>(cosine)), "libm.so.6"));

  // The driver's handle: hooked names come from vgpu, others from the driver.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(cuda != nullptr);
  void* alloc = dlsym(cuda, "cuMemAlloc_v2");
  CHECK(alloc != nullptr && EndsWith(ObjectOf(alloc), hooked_object));
  void* get_name = dlsym(cuda, "cuDeviceGetName");
  CHECK(get_name != nullptr && EndsWith(ObjectOf(get_name), "libcuda.so.1"));
  // A second dlopen by another name of the same library is the same handle, and works too.
  void* cuda_again = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (cuda_again != nullptr) CHECK(dlsym(cuda_again, "cuMemAlloc_v2") == alloc);

  // Missing names: NULL and a dlerror() message, as without vgpu.
  dlerror();
  CHECK(dlsym(cuda, "cuNoSuchFunction") == nullptr);
  const char* error = dlerror();
  CHECK(error != nullptr && std::strstr(error, "cuNoSuchFunction") != nullptr);

  // NVML by handle.
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  CHECK(nvml != nullptr);
  void* nvml_init = dlsym(nvml, "nvmlInit_v2");
  CHECK(nvml_init != nullptr && EndsWith(ObjectOf(nvml_init), hooked_nvml_object));
  CHECK(reinterpret_cast<int (*)()>(nvml_init)() == 0);

  // The exported names, for programs linked against the driver, resolve to vgpu first.
  void* exported = dlsym(RTLD_DEFAULT, "cuInit");
  if (expect_vgpu) CHECK(exported != nullptr && EndsWith(ObjectOf(exported), "libvgpu.so"));

  std::printf("dlsym_lookup ok\n");
  return 0;
}
