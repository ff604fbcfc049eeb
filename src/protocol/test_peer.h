// A scripted peer for tests of the registration protocol's clients: a unix stream socket in a
// fresh temporary directory, served by one thread that accepts connections one after another,
// keeps the bytes of each request it reads, and answers with a fixed reply, or holds the
// connection open without answering (`silent`), then closes it. It never decodes what it gets:
// tests script garbage, other versions and error replies as easily as good ones.
//
// Test-only (target vgpu_protocol_test_util); never linked into libvgpu.so, vgpu or vgpu-node.
// Thread safety: path() is constant; last_request() may be called while the thread serves.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace vgpu::wire::testing {

class ScriptedPeer {
 public:
  // Binds and listens at once (gtest failures when it cannot), then serves until destroyed.
  ScriptedPeer(std::string reply, bool silent);
  ~ScriptedPeer();
  ScriptedPeer(const ScriptedPeer&) = delete;
  ScriptedPeer& operator=(const ScriptedPeer&) = delete;

  const std::string& path() const { return path_; }
  // The bytes of the last request read (one read of up to 4096 bytes), "" before any.
  std::string last_request() const;

 private:
  void Serve();

  const std::string reply_;
  const bool silent_;
  std::string dir_;
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string last_request_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace vgpu::wire::testing
