#include "k8s/node_reporter.h"

#include <ctime>

#include "common/log.h"

namespace vgpu::k8s {

NodeReporter::NodeReporter(NodeReporterOptions options, KubeApi* api, Inventory* inventory)
    : options_(std::move(options)), api_(api), inventory_(inventory) {}

NodeReporter::~NodeReporter() { Stop(); }

void NodeReporter::Start() {
  stop_ = false;
  // Nothing here is expected to throw; if it does, log it and keep the daemon alive.
  auto guarded = [this](void (NodeReporter::*loop)(), const char* name) {
    return [this, loop, name] {
      while (!stop_) {
        try {
          (this->*loop)();
          return;
        } catch (const std::exception& e) {
          VGPU_ERROR("node reporter (%s): unexpected exception: %s; restarting it", name, e.what());
          std::this_thread::sleep_for(options_.retry);
        }
      }
    };
  };
  report_thread_ = std::thread(guarded(&NodeReporter::ReportLoop, "report"));
  watch_thread_ = std::thread(guarded(&NodeReporter::WatchLoop, "watch"));
}

void NodeReporter::BeginStop() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
  }
  wake_.notify_all();
}

void NodeReporter::Stop() {
  BeginStop();
  if (report_thread_.joinable()) report_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void NodeReporter::RequestReport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
  }
  wake_.notify_all();
}

Status NodeReporter::ReportNow() {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  const std::vector<GpuInfo> gpus = inventory_->Get();
  Json patch = AnnotationPatch({{options_.protocol->register_annotation, options_.encode(gpus)},
                                {options_.protocol->handshake_annotation, HandshakeReported(now)}});
  ApiResponse answer = api_->MergePatch(NodePath(options_.node_name), patch);
  if (!answer.ok()) {
    return Status::Error("cannot report the GPUs of node " + options_.node_name + ": " + answer.Describe());
  }
  ++reports_;
  return Status::Ok();
}

void NodeReporter::ReportLoop() {
  uint64_t seen = 0;
  while (!stop_) {
    seen = inventory_->version();
    Status status = ReportNow();
    if (!status.ok && !stop_) VGPU_ERROR("%s", status.message.c_str());  // with stop_: cancelled
    const auto wait = status.ok ? options_.interval : options_.retry;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    std::unique_lock<std::mutex> lock(mu_);
    requested_ = false;
    // Wake for a request, a stop, an inventory change (polled in short steps), or the deadline.
    while (!stop_ && !requested_ && std::chrono::steady_clock::now() < deadline) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (inventory_->version() != seen) break;
    }
  }
}

void NodeReporter::WatchLoop() {
  std::string version;
  while (!stop_) {
    ApiResponse node = api_->Get(NodePath(options_.node_name));
    if (node.ok()) {
      version = JsonString(node.body, {"metadata", "resourceVersion"});
      const auto annotations = Annotations(node.body);
      const std::string* handshake = FindAnnotation(annotations, options_.protocol->handshake_annotation);
      if (handshake != nullptr && HandshakeWantsReport(*handshake)) RequestReport();
      const auto opened = std::chrono::steady_clock::now();
      ApiResponse end = api_->Watch(
          NodeWatchPath(options_.node_name, version, options_.watch_timeout_seconds),
          [&](const Json& event) {
            const std::string type = JsonString(event, {"type"});
            if (type == "ERROR") return false;  // e.g. 410 Gone: start over from a fresh GET
            const Json* object = JsonFind(event, {"object"});
            if (object == nullptr) return true;
            const auto seen = Annotations(*object);
            const std::string* value = FindAnnotation(seen, options_.protocol->handshake_annotation);
            if (value != nullptr && HandshakeWantsReport(*value)) RequestReport();
            return !stop_.load();
          },
          &stop_);
      if (stop_) break;
      // The server closed the watch (timeoutSeconds): reopen at once, unless it closes at once.
      if (end.ok() && std::chrono::steady_clock::now() - opened > std::chrono::seconds(1)) continue;
      if (!end.ok()) VGPU_WARN("watch on node %s ended: %s", options_.node_name.c_str(), end.Describe().c_str());
    } else if (!stop_) {  // with stop_: cancelled (KubeApi::CancelAll)
      VGPU_WARN("cannot read node %s: %s", options_.node_name.c_str(), node.Describe().c_str());
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, options_.retry, [&] { return stop_.load(); });
  }
}

}  // namespace vgpu::k8s
