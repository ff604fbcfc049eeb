// Where `vgpu` finds libvgpu.so (used by `vgpu run` and `vgpu info`).
//
// Search order, first hit wins:
//   1. --library PATH          (must exist: an explicit choice never falls through)
//   2. $VGPU_LIBRARY           (must exist, when set and non-empty)
//   3. <vgpu dir>/libvgpu.so   (the build tree: build/vgpu next to build/libvgpu.so)
//   4. <vgpu dir>/../lib/vgpu/libvgpu.so   (an installed tree: bin/ and lib/vgpu/)
// <vgpu dir> is the directory of the running executable (/proc/self/exe).
//
// FindLibrary is pure (the file test is passed in); LibrarySearchFromProcess and
// IsRegularFile / AbsolutePath are the edge that reads the process and the file system.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vgpu::cli {

struct LibrarySearch {
  std::string flag;                 // --library; empty = not given
  std::optional<std::string> env;   // $VGPU_LIBRARY; nullopt or empty = not set
  std::string exe_dir;              // empty = unknown (skips steps 3 and 4)
};

struct LibraryLookup {
  std::string path;                 // the library found; empty on error
  std::string source;               // where it came from: "--library", "$VGPU_LIBRARY", ...
  std::vector<std::string> tried;   // every candidate looked at, in order
  std::string error;                // empty = found; else one line naming what was tried
  bool ok() const { return error.empty(); }
};

LibraryLookup FindLibrary(const LibrarySearch& search,
                          const std::function<bool(const std::string& path)>& is_file);

// Reads $VGPU_LIBRARY and the executable's directory.
LibrarySearch LibrarySearchFromProcess(std::string flag);

// True when `path` names a regular file (after following symlinks).
bool IsRegularFile(const std::string& path);

// The canonical absolute path (realpath); `path` itself when that fails.
std::string AbsolutePath(const std::string& path);

}  // namespace vgpu::cli
