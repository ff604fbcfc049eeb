#include "node/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "protocol/wire_transport.h"

namespace vgpu::node {
namespace {

constexpr size_t kMaxHead = 8192;
constexpr int64_t kRequestTimeoutNs = 2'000'000'000;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
  }
  return "Unknown";
}

void WriteAll(int fd, const std::string& data, int64_t deadline_ns) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int64_t left = (deadline_ns - wire::MonotonicNs()) / 1'000'000;
      if (left <= 0) return;
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, static_cast<int>(left));
      continue;
    }
    return;
  }
}

}  // namespace

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(const std::string& path, HttpRoute route) { routes_[path] = std::move(route); }

bool HttpServer::ParseRequestLine(const std::string& head, std::string* method, std::string* path) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string::npos || sp1 == 0) return false;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || sp2 == sp1 + 1) return false;
  if (line.compare(sp2 + 1, 7, "HTTP/1.") != 0) return false;
  *method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t query = target.find('?');
  if (query != std::string::npos) target.resize(query);
  if (target.empty() || target[0] != '/') return false;
  *path = target;
  return true;
}

Status HttpServer::Start(const std::string& listen_spec) {
  const size_t colon = listen_spec.rfind(':');
  if (colon == std::string::npos) return Status::Error("metrics_listen \"" + listen_spec + "\": expected host:port");
  std::string host = listen_spec.substr(0, colon);
  const int port = atoi(listen_spec.c_str() + colon + 1);
  if (host.empty() || host == "*") host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::Error("metrics_listen \"" + listen_spec + "\": host must be an IPv4 address");
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::Error(std::string("metrics socket: ") + strerror(errno));
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listen_fd_, 64) != 0) {
    const std::string why = strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return Status::Error("metrics_listen " + listen_spec + ": " + why);
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  bound_ = std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Serve(); });
  return Status::Ok();
}

void HttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
}

void HttpServer::Serve() {
  for (;;) {
    struct pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int rc = poll(p, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (p[1].revents & POLLIN)) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Handle(fd);
    close(fd);
  }
}

void HttpServer::Handle(int fd) {
  const int64_t deadline = wire::MonotonicNs() + kRequestTimeoutNs;
  std::string head;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxHead) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      head.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return;
    const int64_t left = (deadline - wire::MonotonicNs()) / 1'000'000;
    if (left <= 0) return;
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, static_cast<int>(left));
  }
  HttpResponse response;
  std::string method, path;
  if (!ParseRequestLine(head, &method, &path)) {
    response = {400, "text/plain; charset=utf-8", "bad request\n"};
  } else if (method != "GET" && method != "HEAD") {
    response = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
  } else if (const auto it = routes_.find(path); it == routes_.end()) {
    response = {404, "text/plain; charset=utf-8", "not found; try /metrics\n"};
  } else {
    response = it->second();
  }
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + Reason(response.status) +
                    "\r\nContent-Type: " + response.content_type + "\r\nContent-Length: " +
                    std::to_string(response.body.size()) + "\r\nConnection: close\r\n\r\n";
  if (method != "HEAD") out += response.body;
  WriteAll(fd, out, deadline);
}

}  // namespace vgpu::node
