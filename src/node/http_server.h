// A minimal HTTP/1.1 server for the metrics endpoint: GET (and HEAD) only, one request per
// connection (Connection: close), a request head of at most 8 KiB read within 2 s, served one
// connection at a time on one thread (scrapes are rare and cheap). Routes map a path to a
// function returning the body; anything else is 404, other methods 405, a bad request 400.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "node/container_store.h"

namespace vgpu::node {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpRoute = std::function<HttpResponse()>;

class HttpServer {
 public:
  HttpServer() = default;
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Route(const std::string& path, HttpRoute route);
  // `listen`: "host:port" or ":port" (all IPv4 addresses); port 0 picks a free one.
  Status Start(const std::string& listen);
  void Stop();
  // "127.0.0.1:9394", valid after Start.
  const std::string& bound_address() const { return bound_; }

  // Parses "GET /metrics HTTP/1.1" (first line of a request head). Pure; for tests.
  static bool ParseRequestLine(const std::string& head, std::string* method, std::string* path);

 private:
  void Serve();
  void Handle(int fd);

  std::map<std::string, HttpRoute> routes_;  // constant after Start
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::string bound_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace vgpu::node
