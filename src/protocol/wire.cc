#include "protocol/wire.h"

#include <cstring>

namespace vgpu::wire {
namespace {

constexpr size_t kMaxLimitDevices = 64;
// Bounds on repeated entries of a query reply, so a hostile reply cannot make the reader allocate
// far more than the payload (an empty nested field costs 4 bytes on the wire).
constexpr size_t kMaxQueryContainers = 4096;
constexpr size_t kMaxQueryGpus = 64;
constexpr size_t kMaxQueryBypass = 4096;

// --- writing ------------------------------------------------------------------------------------

class Writer {
 public:
  void U32(uint16_t tag, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Raw(tag, b, 4);
  }
  void I32(uint16_t tag, int32_t v) { U32(tag, static_cast<uint32_t>(v)); }
  void U64(uint16_t tag, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Raw(tag, b, 8);
  }
  // Strings longer than kMaxStringBytes are cut (our own messages never carry such strings).
  void Str(uint16_t tag, std::string_view s) {
    if (s.empty()) return;  // absent = empty
    if (s.size() > kMaxStringBytes) s = s.substr(0, kMaxStringBytes);
    Raw(tag, s.data(), s.size());
  }
  void Nested(uint16_t tag, const std::string& bytes) {
    if (bytes.size() <= 0xFFFF) Raw(tag, bytes.data(), bytes.size());
  }
  const std::string& bytes() const { return out_; }

 private:
  void Raw(uint16_t tag, const void* data, size_t length) {
    unsigned char head[4] = {static_cast<unsigned char>(tag), static_cast<unsigned char>(tag >> 8),
                             static_cast<unsigned char>(length), static_cast<unsigned char>(length >> 8)};
    out_.append(reinterpret_cast<const char*>(head), 4);
    out_.append(static_cast<const char*>(data), length);
  }
  std::string out_;
};

// --- reading ------------------------------------------------------------------------------------

uint32_t LoadU32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

uint64_t LoadU64(const unsigned char* p) {
  return static_cast<uint64_t>(LoadU32(p)) | static_cast<uint64_t>(LoadU32(p + 4)) << 32;
}

struct Field {
  uint16_t tag = 0;
  std::string_view value;
};

// Iterates the fields of a payload, enforcing the singular-field rule for tags < 64.
class Reader {
 public:
  Reader(std::string_view payload, const char* what) : rest_(payload), what_(what) {}

  // true with *f set; false at the end or on error (then error() is non-empty).
  bool Next(Field* f) {
    if (!error_.empty() || rest_.empty()) return false;
    if (rest_.size() < 4) return Fail("truncated field header (" + std::to_string(rest_.size()) + " bytes left)");
    const auto* p = reinterpret_cast<const unsigned char*>(rest_.data());
    f->tag = static_cast<uint16_t>(p[0] | p[1] << 8);
    const size_t length = static_cast<size_t>(p[2] | p[3] << 8);
    if (rest_.size() - 4 < length) {
      return Fail("field " + std::to_string(f->tag) + " claims " + std::to_string(length) + " bytes, " +
                  std::to_string(rest_.size() - 4) + " left");
    }
    f->value = rest_.substr(4, length);
    rest_.remove_prefix(4 + length);
    return true;
  }

  // Marks `tag` seen; false (with an error) when a singular field repeats.
  bool Once(uint16_t tag) {
    if (tag >= 64) return true;
    const uint64_t bit = uint64_t{1} << tag;
    if (seen_ & bit) return Fail("field " + std::to_string(tag) + " repeated");
    seen_ |= bit;
    return true;
  }
  bool Seen(uint16_t tag) const { return tag < 64 && (seen_ & (uint64_t{1} << tag)) != 0; }

  bool U32(const Field& f, uint32_t* v) {
    if (!Once(f.tag)) return false;
    if (f.value.size() != 4) return Width(f, 4);
    *v = LoadU32(reinterpret_cast<const unsigned char*>(f.value.data()));
    return true;
  }
  bool I32(const Field& f, int32_t* v) {
    uint32_t u = 0;
    if (!U32(f, &u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool U64(const Field& f, uint64_t* v) {
    if (!Once(f.tag)) return false;
    if (f.value.size() != 8) return Width(f, 8);
    *v = LoadU64(reinterpret_cast<const unsigned char*>(f.value.data()));
    return true;
  }
  bool Str(const Field& f, std::string* v) {
    if (!Once(f.tag)) return false;
    if (f.value.size() > kMaxStringBytes) return Fail("field " + std::to_string(f.tag) + ": string longer than " + std::to_string(kMaxStringBytes) + " bytes");
    if (f.value.find('\0') != std::string_view::npos) return Fail("field " + std::to_string(f.tag) + ": string contains a NUL byte");
    v->assign(f.value.data(), f.value.size());
    return true;
  }
  // A nested message decoded with `decode`; errors are prefixed with this field.
  template <typename T, typename Fn>
  bool Nested(const Field& f, T* v, Fn decode) {
    const std::string problem = decode(f.value, v);
    if (!problem.empty()) return Fail("field " + std::to_string(f.tag) + ": " + problem);
    return true;
  }
  bool Require(uint16_t tag, const char* name) {
    if (!error_.empty() || Seen(tag)) return error_.empty();
    return Fail(std::string("required field ") + std::to_string(tag) + " (" + name + ") missing");
  }
  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::string(what_) + ": " + message;
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  bool Width(const Field& f, size_t want) {
    return Fail("field " + std::to_string(f.tag) + ": expected " + std::to_string(want) + " bytes, got " +
                std::to_string(f.value.size()));
  }

  std::string_view rest_;
  const char* what_;
  uint64_t seen_ = 0;
  std::string error_;
};

// --- nested messages ----------------------------------------------------------------------------

std::string EncodeDevice(const DeviceLimits& d) {
  Writer w;
  w.I32(1, d.ordinal);
  w.Str(2, d.uuid);
  w.U64(3, d.memory_limit);
  w.U32(4, d.sm_limit);
  w.U32(5, d.sm_soft_limit);
  return w.bytes();
}

std::string DecodeDevice(std::string_view payload, DeviceLimits* d) {
  Reader r(payload, "device limits");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.I32(f, &d->ordinal); break;
      case 2: r.Str(f, &d->uuid); break;
      case 3: r.U64(f, &d->memory_limit); break;
      case 4: r.U32(f, &d->sm_limit); break;
      case 5: r.U32(f, &d->sm_soft_limit); break;
      default: break;
    }
  }
  return r.error();
}

std::string EncodeLimits(const Limits& l) {
  Writer w;
  w.U64(1, l.default_memory_limit);
  w.U32(2, l.default_sm_limit);
  w.U32(3, l.default_sm_soft_limit);
  w.U32(4, l.task_priority);
  for (size_t i = 0; i < l.devices.size() && i < kMaxLimitDevices; ++i) w.Nested(5, EncodeDevice(l.devices[i]));
  return w.bytes();
}

std::string DecodeLimits(std::string_view payload, Limits* l) {
  Reader r(payload, "limits");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U64(f, &l->default_memory_limit); break;
      case 2: r.U32(f, &l->default_sm_limit); break;
      case 3: r.U32(f, &l->default_sm_soft_limit); break;
      case 4: r.U32(f, &l->task_priority); break;
      case 5:
        if (l->devices.size() >= kMaxLimitDevices) {
          r.Fail("more than " + std::to_string(kMaxLimitDevices) + " devices");
          break;
        }
        l->devices.emplace_back();
        r.Nested(f, &l->devices.back(), DecodeDevice);
        break;
      default: break;
    }
  }
  return r.error();
}

std::string EncodeContainer(const ContainerInfo& c) {
  Writer w;
  w.Str(1, c.key);
  w.Str(2, c.pod_uid);
  w.Str(3, c.container_name);
  w.Str(4, c.ns);
  w.Str(5, c.pod_name);
  w.Str(6, c.ledger_path);
  w.Str(7, c.cgroup);
  w.Str(8, c.state);
  w.U32(9, c.registered);
  return w.bytes();
}

std::string DecodeContainer(std::string_view payload, ContainerInfo* c) {
  Reader r(payload, "container");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.Str(f, &c->key); break;
      case 2: r.Str(f, &c->pod_uid); break;
      case 3: r.Str(f, &c->container_name); break;
      case 4: r.Str(f, &c->ns); break;
      case 5: r.Str(f, &c->pod_name); break;
      case 6: r.Str(f, &c->ledger_path); break;
      case 7: r.Str(f, &c->cgroup); break;
      case 8: r.Str(f, &c->state); break;
      case 9: r.U32(f, &c->registered); break;
      default: break;
    }
  }
  return r.error();
}

std::string EncodeGpu(const GpuInfo& g) {
  Writer w;
  w.U32(1, g.index);
  w.Str(2, g.uuid);
  w.Str(3, g.name);
  w.U64(4, g.memory_total);
  w.U64(5, g.memory_used);
  w.U32(6, g.utilization);
  w.U32(7, g.healthy);
  w.Str(8, g.health_reason);
  return w.bytes();
}

std::string DecodeGpu(std::string_view payload, GpuInfo* g) {
  Reader r(payload, "gpu");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U32(f, &g->index); break;
      case 2: r.Str(f, &g->uuid); break;
      case 3: r.Str(f, &g->name); break;
      case 4: r.U64(f, &g->memory_total); break;
      case 5: r.U64(f, &g->memory_used); break;
      case 6: r.U32(f, &g->utilization); break;
      case 7: r.U32(f, &g->healthy); break;
      case 8: r.Str(f, &g->health_reason); break;
      default: break;
    }
  }
  return r.error();
}

std::string EncodeBypass(const BypassInfo& b) {
  Writer w;
  w.U32(1, b.host_pid);
  w.Str(2, b.container_key);
  w.Str(3, b.gpu_uuid);
  w.U64(4, b.memory);
  w.U64(5, b.first_seen_unix);
  w.Str(6, b.comm);
  return w.bytes();
}

std::string DecodeBypass(std::string_view payload, BypassInfo* b) {
  Reader r(payload, "bypass");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U32(f, &b->host_pid); break;
      case 2: r.Str(f, &b->container_key); break;
      case 3: r.Str(f, &b->gpu_uuid); break;
      case 4: r.U64(f, &b->memory); break;
      case 5: r.U64(f, &b->first_seen_unix); break;
      case 6: r.Str(f, &b->comm); break;
      default: break;
    }
  }
  return r.error();
}

void StoreU32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

const char* StatusName(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kRefused: return "refused";
    case Status::kMalformed: return "malformed request";
    case Status::kUnsupportedVersion: return "unsupported protocol version";
    case Status::kUnsupportedType: return "unsupported message type";
    case Status::kInternal: return "internal error";
  }
  return "unknown status";
}

void EncodeHeader(const FrameHeader& h, unsigned char out[kHeaderBytes]) {
  StoreU32(out, h.magic);
  out[4] = static_cast<unsigned char>(h.version);
  out[5] = static_cast<unsigned char>(h.version >> 8);
  const auto type = static_cast<uint16_t>(h.type);
  out[6] = static_cast<unsigned char>(type);
  out[7] = static_cast<unsigned char>(type >> 8);
  StoreU32(out + 8, h.payload_length);
  StoreU32(out + 12, h.reserved);
}

std::string DecodeHeader(const unsigned char in[kHeaderBytes], uint32_t max_payload, FrameHeader* h) {
  h->magic = LoadU32(in);
  h->version = static_cast<uint16_t>(in[4] | in[5] << 8);
  h->type = static_cast<MessageType>(static_cast<uint16_t>(in[6] | in[7] << 8));
  h->payload_length = LoadU32(in + 8);
  h->reserved = LoadU32(in + 12);
  if (h->magic != kMagic) return "not a vgpu frame (bad magic)";
  if (h->reserved != 0) return "reserved header field is not 0";
  if (h->payload_length > max_payload) {
    return "payload of " + std::to_string(h->payload_length) + " bytes exceeds the limit of " +
           std::to_string(max_payload);
  }
  return "";
}

std::string EncodeFrame(MessageType type, std::string_view payload) {
  FrameHeader h;
  h.type = type;
  h.payload_length = static_cast<uint32_t>(payload.size());
  unsigned char head[kHeaderBytes];
  EncodeHeader(h, head);
  std::string frame(reinterpret_cast<const char*>(head), kHeaderBytes);
  frame.append(payload.data(), payload.size());
  return frame;
}

std::string EncodeRegisterRequest(const RegisterRequest& m) {
  Writer w;
  w.Str(1, m.pod_uid);
  w.Str(2, m.container_name);
  w.U32(3, m.pid);
  w.Str(4, m.client);
  return w.bytes();
}

std::string DecodeRegisterRequest(std::string_view payload, RegisterRequest* m) {
  Reader r(payload, "register request");
  Field f;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.Str(f, &m->pod_uid); break;
      case 2: r.Str(f, &m->container_name); break;
      case 3: r.U32(f, &m->pid); break;
      case 4: r.Str(f, &m->client); break;
      default: break;
    }
  }
  if (r.Require(3, "pid") && m->pid == 0) r.Fail("pid is 0");
  return r.error();
}

std::string EncodeRegisterReply(const RegisterReply& m) {
  Writer w;
  w.U32(1, static_cast<uint32_t>(m.status));
  w.Str(2, m.message);
  if (m.status == Status::kOk) {
    w.U32(3, m.host_pid);
    w.Str(4, m.ledger_path);
    w.Str(5, m.container_key);
    w.Nested(6, EncodeLimits(m.limits));
  }
  return w.bytes();
}

std::string DecodeRegisterReply(std::string_view payload, RegisterReply* m) {
  Reader r(payload, "register reply");
  Field f;
  uint32_t status = 0;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U32(f, &status); break;
      case 2: r.Str(f, &m->message); break;
      case 3: r.U32(f, &m->host_pid); break;
      case 4: r.Str(f, &m->ledger_path); break;
      case 5: r.Str(f, &m->container_key); break;
      case 6:
        if (r.Once(f.tag)) r.Nested(f, &m->limits, DecodeLimits);
        break;
      default: break;
    }
  }
  r.Require(1, "status");
  m->status = static_cast<Status>(status);
  if (r.error().empty() && m->status == Status::kOk) {
    if (r.Require(3, "host pid") && m->host_pid == 0) r.Fail("host pid is 0");
    r.Require(4, "ledger path");
  }
  return r.error();
}

std::string EncodeQueryReply(const QueryReply& m) {
  Writer w;
  w.U32(1, static_cast<uint32_t>(m.status));
  w.Str(2, m.message);
  w.Str(3, m.node);
  for (const ContainerInfo& c : m.containers) w.Nested(4, EncodeContainer(c));
  for (const GpuInfo& g : m.gpus) w.Nested(5, EncodeGpu(g));
  for (const BypassInfo& b : m.bypass) w.Nested(6, EncodeBypass(b));
  return w.bytes();
}

std::string DecodeQueryReply(std::string_view payload, QueryReply* m) {
  Reader r(payload, "query reply");
  Field f;
  uint32_t status = 0;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U32(f, &status); break;
      case 2: r.Str(f, &m->message); break;
      case 3: r.Str(f, &m->node); break;
      case 4:
        if (m->containers.size() >= kMaxQueryContainers) {
          r.Fail("more than " + std::to_string(kMaxQueryContainers) + " containers");
          break;
        }
        m->containers.emplace_back();
        r.Nested(f, &m->containers.back(), DecodeContainer);
        break;
      case 5:
        if (m->gpus.size() >= kMaxQueryGpus) {
          r.Fail("more than " + std::to_string(kMaxQueryGpus) + " GPUs");
          break;
        }
        m->gpus.emplace_back();
        r.Nested(f, &m->gpus.back(), DecodeGpu);
        break;
      case 6:
        if (m->bypass.size() >= kMaxQueryBypass) {
          r.Fail("more than " + std::to_string(kMaxQueryBypass) + " bypass entries");
          break;
        }
        m->bypass.emplace_back();
        r.Nested(f, &m->bypass.back(), DecodeBypass);
        break;
      default: break;
    }
  }
  r.Require(1, "status");
  m->status = static_cast<Status>(status);
  return r.error();
}

std::string EncodeErrorReply(const ErrorReply& m) {
  Writer w;
  w.U32(1, static_cast<uint32_t>(m.status));
  w.Str(2, m.message);
  return w.bytes();
}

std::string DecodeErrorReply(std::string_view payload, ErrorReply* m) {
  Reader r(payload, "error reply");
  Field f;
  uint32_t status = 0;
  while (r.Next(&f)) {
    switch (f.tag) {
      case 1: r.U32(f, &status); break;
      case 2: r.Str(f, &m->message); break;
      default: break;
    }
  }
  r.Require(1, "status");
  m->status = static_cast<Status>(status);
  return r.error();
}

}  // namespace vgpu::wire
