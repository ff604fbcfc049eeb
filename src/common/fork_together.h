// Test and benchmark support: run a function in several forked processes that start at the same
// moment, and collect what each returns. Used by the registration tests and bench/registration
// (many processes of one container registering at once).
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <type_traits>
#include <vector>

namespace vgpu {

// Forks `n` children. Each waits until all are forked and `before_go(pids)` has run in the parent
// (e.g. to fake a child's /proc entry), then runs `child()` and sends its result (trivially
// copyable) back through a pipe. Returns the results in the order they arrived; a child that died
// before writing contributes none (callers compare the count with n). Waits for every child.
template <typename Result, typename Child, typename BeforeGo>
std::vector<Result> ForkTogether(int n, Child child, BeforeGo before_go) {
  static_assert(std::is_trivially_copyable_v<Result>, "results travel through a pipe");
  int go[2], out[2];
  if (pipe(go) != 0) return {};
  if (pipe(out) != 0) {
    close(go[0]);
    close(go[1]);
    return {};
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      close(out[0]);
      char c;
      while (read(go[0], &c, 1) > 0) {
      }
      const Result r = child();
      [[maybe_unused]] ssize_t w = write(out[1], &r, sizeof(r));
      _exit(0);
    }
    if (pid > 0) pids.push_back(pid);
  }
  close(go[0]);
  close(out[1]);
  before_go(pids);
  close(go[1]);  // everyone goes
  std::vector<Result> results;
  Result r;
  while (read(out[0], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r))) results.push_back(r);
  close(out[0]);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  return results;
}

}  // namespace vgpu
