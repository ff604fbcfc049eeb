// Runs a test program with a chosen environment and captures what it printed.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace vgpu::testing {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it could not be started
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Starts `argv[0]` (a path) with exactly `env` as its environment, waits at most
// `timeout_seconds`, and returns its exit status and output.
RunResult RunProgram(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                     int timeout_seconds = 60);

// Number of non-overlapping occurrences of `needle` in `haystack`.
int CountOccurrences(const std::string& haystack, const std::string& needle);

}  // namespace vgpu::testing
