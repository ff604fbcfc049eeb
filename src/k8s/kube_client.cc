#include "k8s/kube_client.h"

#include <curl/curl.h>

#include <fstream>
#include <sstream>

namespace vgpu::k8s {
namespace {

constexpr size_t kMaxIdleHandles = 4;
constexpr size_t kMaxBodyBytes = 64 * 1024 * 1024;  // a pod list of a busy node is far smaller
// How often a transfer the caller may stop (a watch) looks at its stop flag while no data comes.
// libcurl's progress callback runs only about once a second on an idle connection, which made
// every daemon stop wait up to a second for its node watch.
constexpr int kStopPollMs = 50;
constexpr char kCancelled[] = "the API client was stopped (the daemon is shutting down)";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::ostringstream text;
  text << file.rdbuf();
  *out = text.str();
  return !file.bad();
}

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  size_t start = text.find_first_not_of(" \n\r\t");
  return start == std::string::npos ? "" : text.substr(start);
}

// The message of a Kubernetes Status object, else the start of the body.
std::string ErrorMessage(const Json& body, const std::string& raw) {
  std::string message = JsonString(body, {"message"});
  if (!message.empty()) return message;
  return raw.substr(0, 200);
}

}  // namespace

struct HttpKubeApi::Request {
  const char* method = "GET";
  std::string path;
  std::string body;
  const char* content_type = nullptr;
  // Watches: each line of the body is one event.
  const std::function<bool(const Json& event)>* on_event = nullptr;
  const std::atomic<bool>* stop = nullptr;
};

namespace {

struct Transfer {
  CURL* curl = nullptr;
  std::string body;
  bool too_large = false;
  // Watch state.
  const std::function<bool(const Json&)>* on_event = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string pending;
  bool stopped_by_caller = false;
  const std::atomic<bool>* cancelled = nullptr;  // HttpKubeApi::CancelAll, for every request

  bool StopWanted() const {
    return (stop != nullptr && stop->load()) || (cancelled != nullptr && cancelled->load());
  }
};

size_t OnData(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (transfer->on_event == nullptr) {
    if (transfer->body.size() + bytes > kMaxBodyBytes) {
      transfer->too_large = true;
      return 0;
    }
    transfer->body.append(data, bytes);
    return bytes;
  }
  long status = 0;
  curl_easy_getinfo(transfer->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {  // an error answer to the watch request: keep it whole
    transfer->body.append(data, bytes);
    return transfer->body.size() > kMaxBodyBytes ? 0 : bytes;
  }
  transfer->pending.append(data, bytes);
  size_t start = 0;
  for (size_t end = transfer->pending.find('\n'); end != std::string::npos;
       end = transfer->pending.find('\n', start)) {
    std::string line = transfer->pending.substr(start, end - start);
    start = end + 1;
    if (Trim(line).empty()) continue;
    Json event = ParseJson(line);
    bool more = false;
    try {  // never let an exception unwind through libcurl
      more = !event.is_discarded() && (*transfer->on_event)(event);
    } catch (const std::exception&) {
      more = false;
    }
    if (!more || transfer->StopWanted()) {
      transfer->stopped_by_caller = true;
      return 0;
    }
  }
  transfer->pending.erase(0, start);
  if (transfer->pending.size() > kMaxBodyBytes) {
    transfer->too_large = true;
    return 0;
  }
  return bytes;
}

// Any request: ends the transfer once CancelAll was called (libcurl calls this about once a second
// while it waits, and as data flows).
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<Transfer*>(user);
  if (!transfer->StopWanted()) return 0;
  transfer->stopped_by_caller = true;
  return 1;  // aborts the transfer
}

// Runs the transfer on a multi handle of its own, waking every kStopPollMs to look at the
// caller's stop flag: a stop ends it within that, whether data flows or not.
CURLcode PerformStoppable(CURL* curl, Transfer* transfer) {
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return CURLE_OUT_OF_MEMORY;
  if (curl_multi_add_handle(multi, curl) != CURLM_OK) {
    curl_multi_cleanup(multi);
    return CURLE_FAILED_INIT;
  }
  CURLcode result = CURLE_OK;
  for (;;) {
    int running = 0;
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
    bool done = running == 0;
    int queued = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
      if (message->msg == CURLMSG_DONE && message->easy_handle == curl) {
        result = message->data.result;
        done = true;
      }
    }
    if (done) break;
    if (transfer->StopWanted()) {
      transfer->stopped_by_caller = true;
      result = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    curl_multi_poll(multi, nullptr, 0, kStopPollMs, nullptr);
  }
  curl_multi_remove_handle(multi, curl);
  curl_multi_cleanup(multi);
  return result;
}

// The ApiResponse for a finished transfer: a transport failure is "no answer" (status 0), a
// watch the caller stopped is a normal end, a body that is not JSON is no usable answer.
ApiResponse Interpret(const std::string& what, bool watch, CURLcode code, int http_status, const char* curl_error,
                      Transfer& transfer) {
  ApiResponse response;
  response.http_status = http_status;
  if (code != CURLE_OK) {
    if (watch && transfer.stopped_by_caller) {
      response.http_status = http_status == 0 ? 200 : http_status;
      return response;
    }
    if (transfer.stopped_by_caller) {  // CancelAll
      response.http_status = 0;
      response.error = kCancelled;
      return response;
    }
    if (transfer.too_large) {
      response.error = "response body larger than " + std::to_string(kMaxBodyBytes) + " bytes";
    } else {
      response.error = std::string(curl_easy_strerror(code)) + (curl_error[0] != '\0' ? std::string(": ") + curl_error : "");
    }
    // A transport failure after the headers still is no usable answer.
    if (!watch || http_status == 0) response.http_status = 0;
    return response;
  }
  if (!transfer.body.empty()) {
    response.body = ParseJson(transfer.body);
    if (response.body.is_discarded()) {
      response.body = nullptr;
      if (response.ok()) {
        response.http_status = 0;
        response.error = "the answer to " + what + " is not JSON";
        return response;
      }
    }
  }
  if (!response.ok()) response.error = ErrorMessage(response.body, transfer.body);
  return response;
}

}  // namespace

Status InClusterOptions(const std::function<const char*(const char*)>& getenv, KubeClientOptions* out,
                        const std::string& sa_dir) {
  const char* host = getenv("KUBERNETES_SERVICE_HOST");
  const char* port = getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return Status::Error("not running in a pod: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are unset "
                         "(set the API server, CA file and token file explicitly)");
  }
  std::string host_text = host;
  if (host_text.find(':') != std::string::npos) host_text = "[" + host_text + "]";  // IPv6
  KubeClientOptions options = *out;
  options.server = "https://" + host_text + ":" + port;
  options.token_file = sa_dir + "/token";
  options.ca_file = sa_dir + "/ca.crt";
  std::string ignored;
  if (!ReadFile(options.token_file, &ignored)) return Status::Error("cannot read " + options.token_file);
  if (!ReadFile(options.ca_file, &ignored)) return Status::Error("cannot read " + options.ca_file);
  *out = options;
  return Status::Ok();
}

std::unique_ptr<HttpKubeApi> HttpKubeApi::Create(const KubeClientOptions& options, Status* status) {
  if (options.server.rfind("https://", 0) != 0) {
    *status = Status::Error("API server \"" + options.server + "\" is not an https:// URL");
    return nullptr;
  }
  std::string ignored;
  if (!options.ca_file.empty() && !ReadFile(options.ca_file, &ignored)) {
    *status = Status::Error("cannot read the API server CA file " + options.ca_file);
    return nullptr;
  }
  GlobalInit();
  *status = Status::Ok();
  return std::unique_ptr<HttpKubeApi>(new HttpKubeApi(options));
}

HttpKubeApi::HttpKubeApi(const KubeClientOptions& options) : options_(options) {}

HttpKubeApi::~HttpKubeApi() {
  for (void* handle : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

int HttpKubeApi::token_reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return token_reads_;
}

Status HttpKubeApi::Token(bool force, std::string* token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.token_file.empty()) {
    token->clear();
    return Status::Ok();
  }
  const auto now = std::chrono::steady_clock::now();
  if (force || token_reads_ == 0 || now - token_read_at_ >= std::chrono::seconds(options_.token_refresh_seconds)) {
    std::string text;
    if (!ReadFile(options_.token_file, &text)) return Status::Error("cannot read token file " + options_.token_file);
    token_ = Trim(text);
    token_read_at_ = now;
    ++token_reads_;
  }
  *token = token_;
  return Status::Ok();
}

void* HttpKubeApi::AcquireHandle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_handles_.empty()) {
      void* handle = idle_handles_.back();
      idle_handles_.pop_back();
      return handle;
    }
  }
  return curl_easy_init();
}

void HttpKubeApi::ReleaseHandle(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_handles_.size() < kMaxIdleHandles) {
    idle_handles_.push_back(handle);
  } else {
    curl_easy_cleanup(static_cast<CURL*>(handle));
  }
}

void HttpKubeApi::CancelAll() { cancelled_ = true; }

ApiResponse HttpKubeApi::Perform(const Request& request) {
  if (cancelled_) return {0, kCancelled, nullptr};
  std::string token;
  if (Status status = Token(false, &token); !status.ok) return {0, status.message, nullptr};
  ApiResponse response = PerformOnce(request, token);
  if (response.http_status == 401 && !options_.token_file.empty()) {
    // The token may have been rotated since it was last read.
    if (Status status = Token(true, &token); !status.ok) return {0, status.message, nullptr};
    response = PerformOnce(request, token);
  }
  return response;
}

ApiResponse HttpKubeApi::PerformOnce(const Request& request, const std::string& token) {
  CURL* curl = static_cast<CURL*>(AcquireHandle());
  if (curl == nullptr) return {0, "curl_easy_init failed", nullptr};
  curl_easy_reset(curl);
  const bool watch = request.on_event != nullptr;
  const std::string url = options_.server + request.path;
  struct curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  if (request.content_type != nullptr) {
    headers = curl_slist_append(headers, (std::string("Content-Type: ") + request.content_type).c_str());
  }
  Transfer transfer;
  transfer.curl = curl;
  transfer.on_event = request.on_event;
  transfer.stop = request.stop;
  transfer.cancelled = &cancelled_;
  char error_buffer[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(watch ? options_.watch_timeout_ms : options_.timeout_ms));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!options_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  if (std::string(request.method) != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
  }
  CURLcode code = request.stop != nullptr ? PerformStoppable(curl, &transfer) : curl_easy_perform(curl);
  long http_status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
  curl_slist_free_all(headers);
  ReleaseHandle(curl);
  return Interpret(std::string(request.method) + " " + request.path, watch, code, static_cast<int>(http_status),
                   error_buffer, transfer);
}

ApiResponse HttpKubeApi::Get(const std::string& path) {
  Request request;
  request.path = path;
  return Perform(request);
}

ApiResponse HttpKubeApi::MergePatch(const std::string& path, const Json& patch) {
  Request request;
  request.method = "PATCH";
  request.path = path;
  request.body = patch.dump(-1, ' ', false, Json::error_handler_t::replace);
  request.content_type = "application/merge-patch+json";
  return Perform(request);
}

ApiResponse HttpKubeApi::Watch(const std::string& path, const std::function<bool(const Json& event)>& on_event,
                               const std::atomic<bool>* stop) {
  Request request;
  request.path = path;
  request.on_event = &on_event;
  request.stop = stop;
  return Perform(request);
}

}  // namespace vgpu::k8s
