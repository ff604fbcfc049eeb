#include "cli/library_path.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace vgpu::cli {

LibraryLookup FindLibrary(const LibrarySearch& search,
                          const std::function<bool(const std::string& path)>& is_file) {
  LibraryLookup lookup;
  auto explicit_choice = [&](const std::string& path, const char* source) {
    lookup.tried.push_back(path);
    if (is_file(path)) {
      lookup.path = path;
      lookup.source = source;
    } else {
      lookup.error = std::string("libvgpu.so not found: ") + source + " names " + path +
                     ", which is not an existing file";
    }
    return lookup;
  };
  if (!search.flag.empty()) return explicit_choice(search.flag, "--library");
  if (search.env && !search.env->empty()) return explicit_choice(*search.env, "$VGPU_LIBRARY");

  if (!search.exe_dir.empty()) {
    const std::filesystem::path dir(search.exe_dir);
    const std::pair<std::string, const char*> candidates[] = {
        {(dir / "libvgpu.so").lexically_normal().string(), "next to vgpu"},
        {(dir / ".." / "lib" / "vgpu" / "libvgpu.so").lexically_normal().string(), "install tree"},
    };
    for (const auto& [path, source] : candidates) {
      lookup.tried.push_back(path);
      if (is_file(path)) {
        lookup.path = path;
        lookup.source = source;
        return lookup;
      }
    }
  }
  lookup.error = "libvgpu.so not found (tried";
  for (const std::string& path : lookup.tried) lookup.error += " " + path;
  if (lookup.tried.empty()) lookup.error += " nothing: the vgpu executable's directory is unknown";
  lookup.error += "); pass --library PATH or set VGPU_LIBRARY";
  return lookup;
}

LibrarySearch LibrarySearchFromProcess(std::string flag) {
  LibrarySearch search;
  search.flag = std::move(flag);
  if (const char* env = getenv("VGPU_LIBRARY")) search.env = env;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    search.exe_dir = std::filesystem::path(exe).parent_path().string();
  }
  return search;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string AbsolutePath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) != nullptr) return resolved;
  return path;
}

}  // namespace vgpu::cli
