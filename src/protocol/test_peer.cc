#include "protocol/test_peer.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace vgpu::wire::testing {

ScriptedPeer::ScriptedPeer(std::string reply, bool silent) : reply_(std::move(reply)), silent_(silent) {
  char dir[] = "/tmp/vgpu-peer-XXXXXX";
  const char* made = mkdtemp(dir);
  EXPECT_NE(made, nullptr) << "mkdtemp failed";
  dir_ = made != nullptr ? made : "/tmp";
  path_ = dir_ + "/sock";
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path_;
  EXPECT_EQ(listen(fd_, 16), 0) << path_;
  thread_ = std::thread([this] { Serve(); });
}

ScriptedPeer::~ScriptedPeer() {
  stop_ = true;
  shutdown(fd_, SHUT_RDWR);  // wakes accept()
  thread_.join();
  close(fd_);
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

std::string ScriptedPeer::last_request() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_request_;
}

void ScriptedPeer::Serve() {
  while (!stop_) {
    const int c = accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    const ssize_t n = read(c, buf, sizeof(buf));
    if (n > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_.assign(buf, static_cast<size_t>(n));
    }
    if (silent_) {
      while (!stop_) usleep(10000);
    } else {
      // MSG_NOSIGNAL: a client that gave up must not kill the test with SIGPIPE.
      [[maybe_unused]] ssize_t w = send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
    }
    close(c);
  }
}

}  // namespace vgpu::wire::testing
