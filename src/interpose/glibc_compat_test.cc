// The library's own _dl_find_object and arc4random (glibc_compat.cc) against glibc's: this test
// executable defines them too, so glibc's are reached with dlsym(RTLD_NEXT).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

extern "C" int _dl_find_object(void* address, dl_find_object* result) noexcept;
extern "C" uint32_t arc4random(void);

namespace {

using FindObject = int (*)(void*, dl_find_object*);

FindObject GlibcFindObject() { return reinterpret_cast<FindObject>(dlsym(RTLD_NEXT, "_dl_find_object")); }

void ExpectSameAsGlibc(void* address, const char* what) {
  FindObject glibc = GlibcFindObject();
  if (glibc == nullptr) GTEST_SKIP() << "glibc has no _dl_find_object";
  dl_find_object ours{}, theirs{};
  ASSERT_EQ(_dl_find_object(address, &ours), 0) << what;
  ASSERT_EQ(glibc(address, &theirs), 0) << what;
  EXPECT_EQ(ours.dlfo_eh_frame, theirs.dlfo_eh_frame) << what;
  EXPECT_NE(ours.dlfo_eh_frame, nullptr) << what;
  EXPECT_EQ(ours.dlfo_map_start, theirs.dlfo_map_start) << what;
  EXPECT_LE(reinterpret_cast<uintptr_t>(ours.dlfo_map_start), reinterpret_cast<uintptr_t>(address)) << what;
  EXPECT_GT(reinterpret_cast<uintptr_t>(ours.dlfo_map_end), reinterpret_cast<uintptr_t>(address)) << what;
}

int LocalFunction() { return 42; }

TEST(GlibcCompat, FindObjectAgreesWithGlibcForTheExecutableAndForLibc) {
  ExpectSameAsGlibc(reinterpret_cast<void*>(&LocalFunction), "a function of the test");
  ExpectSameAsGlibc(reinterpret_cast<void*>(&std::printf), "printf (libc)");
}

TEST(GlibcCompat, FindObjectFailsForAnUnmappedAddress) {
  dl_find_object result{};
  EXPECT_EQ(_dl_find_object(reinterpret_cast<void*>(uintptr_t{16}), &result), -1);
}

TEST(GlibcCompat, ExceptionsStillUnwindThroughTheReplacement) {
  // Linked with -static-libgcc like the library, this executable's unwinder calls the
  // _dl_find_object defined in glibc_compat.cc, as libvgpu.so's does.
  bool caught = false;
  try {
    throw LocalFunction();
  } catch (int value) {
    caught = value == 42;
  }
  EXPECT_TRUE(caught);
}

TEST(GlibcCompat, Arc4randomReturnsVaryingValues) {
  const uint32_t a = arc4random(), b = arc4random(), c = arc4random();
  EXPECT_FALSE(a == b && b == c);  // three equal 32-bit draws: 2^-64
}

}  // namespace
