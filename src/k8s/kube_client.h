// HttpKubeApi: the Kubernetes API over HTTPS + JSON (libcurl with OpenSSL, nlohmann::json).
//
// Authentication is a bearer token read from a file and re-read every token_refresh_seconds
// (projected service-account tokens rotate), and at once after a 401 (the request is then
// retried one time). The server is verified against ca_file. Connections are kept alive and
// reused (a small pool of curl handles), so a burst of API calls costs one TLS handshake.
//
// Thread safety: all methods may be called from any number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "k8s/kube_api.h"

namespace vgpu::k8s {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeClientOptions {
  std::string server;       // "https://10.96.0.1:443"
  std::string ca_file;      // PEM bundle that signs the server certificate ("" = system CAs)
  std::string token_file;   // bearer token ("" = none)
  int token_refresh_seconds = 60;
  int timeout_ms = 5000;           // per request; watches are bounded by watch_timeout_ms
  int connect_timeout_ms = 3000;
  int watch_timeout_ms = 600000;
};

// The in-cluster configuration: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with
// <sa_dir>/token and <sa_dir>/ca.crt. Errors when the variables are unset (not in a pod) or
// the files are missing.
Status InClusterOptions(const std::function<const char*(const char*)>& getenv, KubeClientOptions* out,
                        const std::string& sa_dir = kServiceAccountDir);

class HttpKubeApi : public KubeApi {
 public:
  // Errors: empty or non-https server URL, unreadable ca_file.
  static std::unique_ptr<HttpKubeApi> Create(const KubeClientOptions& options, Status* status);
  ~HttpKubeApi() override;

  ApiResponse Get(const std::string& path) override;
  ApiResponse MergePatch(const std::string& path, const Json& patch) override;
  ApiResponse Watch(const std::string& path, const std::function<bool(const Json& event)>& on_event,
                    const std::atomic<bool>* stop) override;
  // A watch ends within kStopPollMs, any other request at libcurl's next progress call (about a
  // second while it waits for the server, at once while data flows).
  void CancelAll() override;

  // How many times the token file has been read (for tests of the re-read).
  int token_reads() const;

 private:
  explicit HttpKubeApi(const KubeClientOptions& options);
  struct Request;
  ApiResponse Perform(const Request& request);
  ApiResponse PerformOnce(const Request& request, const std::string& token);
  // The current token; re-read when older than token_refresh_seconds or when force is set.
  Status Token(bool force, std::string* token);
  void* AcquireHandle();
  void ReleaseHandle(void* handle);

  const KubeClientOptions options_;
  std::atomic<bool> cancelled_{false};  // CancelAll
  mutable std::mutex mu_;
  std::string token_;                                   // guarded by mu_
  std::chrono::steady_clock::time_point token_read_at_;  // guarded by mu_
  int token_reads_ = 0;                                  // guarded by mu_
  std::vector<void*> idle_handles_;                      // guarded by mu_ (CURL*)
};

}  // namespace vgpu::k8s
