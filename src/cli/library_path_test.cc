#include "cli/library_path.h"

#include <gtest/gtest.h>

#include <set>

namespace vgpu::cli {
namespace {

// A fake file system: the set of existing files.
struct FakeFiles {
  std::set<std::string> files;
  std::function<bool(const std::string&)> Test() const {
    return [this](const std::string& path) { return files.count(path) != 0; };
  }
};

TEST(LibraryPathTest, FlagWinsOverEverything) {
  FakeFiles fs{{"/flag/libvgpu.so", "/env/libvgpu.so", "/bin/libvgpu.so"}};
  const LibraryLookup lookup = FindLibrary({"/flag/libvgpu.so", "/env/libvgpu.so", "/bin"}, fs.Test());
  ASSERT_TRUE(lookup.ok()) << lookup.error;
  EXPECT_EQ(lookup.path, "/flag/libvgpu.so");
  EXPECT_EQ(lookup.source, "--library");
}

TEST(LibraryPathTest, MissingFlagIsAnErrorAndDoesNotFallThrough) {
  FakeFiles fs{{"/env/libvgpu.so", "/bin/libvgpu.so"}};
  const LibraryLookup lookup = FindLibrary({"/nope.so", "/env/libvgpu.so", "/bin"}, fs.Test());
  EXPECT_FALSE(lookup.ok());
  EXPECT_TRUE(lookup.path.empty());
  EXPECT_NE(lookup.error.find("--library names /nope.so"), std::string::npos) << lookup.error;
}

TEST(LibraryPathTest, EnvironmentBeforeExecutableDirectory) {
  FakeFiles fs{{"/env/libvgpu.so", "/bin/libvgpu.so"}};
  const LibraryLookup lookup = FindLibrary({"", "/env/libvgpu.so", "/bin"}, fs.Test());
  ASSERT_TRUE(lookup.ok()) << lookup.error;
  EXPECT_EQ(lookup.path, "/env/libvgpu.so");
  EXPECT_EQ(lookup.source, "$VGPU_LIBRARY");
}

TEST(LibraryPathTest, MissingEnvironmentPathIsAnError) {
  FakeFiles fs{{"/bin/libvgpu.so"}};
  const LibraryLookup lookup = FindLibrary({"", "/env/gone.so", "/bin"}, fs.Test());
  EXPECT_FALSE(lookup.ok());
  EXPECT_NE(lookup.error.find("$VGPU_LIBRARY names /env/gone.so"), std::string::npos) << lookup.error;
}

TEST(LibraryPathTest, EmptyEnvironmentCountsAsUnset) {
  FakeFiles fs{{"/bin/libvgpu.so"}};
  const LibraryLookup lookup = FindLibrary({"", "", "/bin"}, fs.Test());
  ASSERT_TRUE(lookup.ok()) << lookup.error;
  EXPECT_EQ(lookup.path, "/bin/libvgpu.so");
}

TEST(LibraryPathTest, NextToTheExecutableBeforeTheInstallTree) {
  FakeFiles fs{{"/usr/bin/libvgpu.so", "/usr/lib/vgpu/libvgpu.so"}};
  LibraryLookup lookup = FindLibrary({"", std::nullopt, "/usr/bin"}, fs.Test());
  ASSERT_TRUE(lookup.ok()) << lookup.error;
  EXPECT_EQ(lookup.path, "/usr/bin/libvgpu.so");
  EXPECT_EQ(lookup.source, "next to vgpu");

  fs.files.erase("/usr/bin/libvgpu.so");
  lookup = FindLibrary({"", std::nullopt, "/usr/bin"}, fs.Test());
  ASSERT_TRUE(lookup.ok()) << lookup.error;
  EXPECT_EQ(lookup.path, "/usr/lib/vgpu/libvgpu.so");
  EXPECT_EQ(lookup.source, "install tree");
  EXPECT_EQ(lookup.tried, (std::vector<std::string>{"/usr/bin/libvgpu.so", "/usr/lib/vgpu/libvgpu.so"}));
}

TEST(LibraryPathTest, NothingFoundListsWhatWasTried) {
  FakeFiles fs;
  LibraryLookup lookup = FindLibrary({"", std::nullopt, "/opt/vgpu/bin"}, fs.Test());
  EXPECT_FALSE(lookup.ok());
  EXPECT_NE(lookup.error.find("/opt/vgpu/bin/libvgpu.so /opt/vgpu/lib/vgpu/libvgpu.so"), std::string::npos)
      << lookup.error;
  EXPECT_NE(lookup.error.find("--library"), std::string::npos);

  lookup = FindLibrary({"", std::nullopt, ""}, fs.Test());
  EXPECT_FALSE(lookup.ok());
  EXPECT_TRUE(lookup.tried.empty());
}

TEST(LibraryPathTest, ProcessSearchReadsTheEnvironmentAndExecutable) {
  setenv("VGPU_LIBRARY", "/from/env.so", 1);
  const LibrarySearch search = LibrarySearchFromProcess("/flag.so");
  unsetenv("VGPU_LIBRARY");
  EXPECT_EQ(search.flag, "/flag.so");
  EXPECT_EQ(search.env, "/from/env.so");
  EXPECT_FALSE(search.exe_dir.empty());
  EXPECT_EQ(search.exe_dir[0], '/');
  EXPECT_FALSE(LibrarySearchFromProcess("").env.has_value());
}

TEST(LibraryPathTest, FileTests) {
  EXPECT_TRUE(IsRegularFile("/proc/self/exe"));
  EXPECT_FALSE(IsRegularFile("/"));
  EXPECT_FALSE(IsRegularFile("/no/such/file"));
  EXPECT_EQ(AbsolutePath("/usr/../usr/bin"), "/usr/bin");
  EXPECT_EQ(AbsolutePath("/no/such/file"), "/no/such/file");
}

}  // namespace
}  // namespace vgpu::cli
