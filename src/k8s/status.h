// Status: the error value of the Kubernetes plugin (src/k8s). Nothing in src/k8s throws across
// its public interfaces; failures are returned as a Status whose message names the input that is
// wrong (the annotation, the pod, the node, the file) and why.
#pragma once

#include <string>
#include <utility>

namespace vgpu::k8s {

struct Status {
  bool ok = true;
  std::string message;  // empty when ok

  static Status Ok() { return {}; }
  static Status Error(std::string m) { return {false, std::move(m)}; }
  // "<context>: <message>" for an error; Ok stays Ok.
  Status Context(const std::string& context) const {
    return ok ? *this : Error(context + ": " + message);
  }
};

}  // namespace vgpu::k8s
