// TEST DOUBLE ONLY: streams and events of the simulated driver. Work is modelled, not run: each
// stream keeps the completion time of its last work; synchronize sleeps until then and query
// compares it with the clock.
#include <algorithm>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

constexpr int kGreatestPriority = -5;

CUresult CreateStream(CUstream* ph, unsigned flags, int priority) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (ph == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* stream = NewHandle<Stream>(HandleType::kStream);
  stream->ctx = ctx;
  stream->flags = flags;
  stream->priority = std::clamp(priority, kGreatestPriority, 0);
  *ph = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}

CUresult DestroyStream(CUstream handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (Lookup<Stream>(handle, HandleType::kStream) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  DeleteHandle(handle);
  return CUDA_SUCCESS;
}

CUresult StreamSynchronize(CUstream handle, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const uint64_t deadline = stream->kind == StreamKind::kLegacy ? BlockingTail(stream->ctx) : stream->tail_ns;
  WaitAndTrim(api, stream->ctx->device, deadline);
  return CUDA_SUCCESS;
}

CUresult StreamQuery(CUstream handle, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return NowNs() >= stream->tail_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult StreamWaitEvent(CUstream handle, CUevent event_handle, unsigned flags, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  const Event* event = Lookup<Event>(event_handle, HandleType::kEvent);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  if (event->recorded && stream->capture == nullptr) stream->tail_ns = std::max(stream->tail_ns, event->time_ns);
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent event_handle, CUstream handle, unsigned flags, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Event* event = Lookup<Event>(event_handle, HandleType::kEvent);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CUDA_SUCCESS;  // an event node: not modelled
  const uint64_t tail = stream->kind == StreamKind::kLegacy ? BlockingTail(stream->ctx) : stream->tail_ns;
  event->recorded = true;
  event->time_ns = std::max(NowNs(), tail);
  return CUDA_SUCCESS;
}

CUresult DestroyEvent(CUevent handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (Lookup<Event>(handle, HandleType::kEvent) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  DeleteHandle(handle);
  return CUDA_SUCCESS;
}

CUresult ElapsedTime(float* ms, CUevent start_handle, CUevent end_handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Event* start = Lookup<Event>(start_handle, HandleType::kEvent);
  const Event* end = Lookup<Event>(end_handle, HandleType::kEvent);
  if (start == nullptr || end == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t now = NowNs();
  if (now < start->time_ns || now < end->time_ns) return CUDA_ERROR_NOT_READY;
  const double delta = static_cast<double>(end->time_ns) - static_cast<double>(start->time_ns);
  *ms = static_cast<float>(delta / 1e6);
  return CUDA_SUCCESS;
}

}  // namespace

void WaitAndTrim(Api& api, int device, uint64_t deadline_ns) {
  api.lock().unlock();
  SleepUntil(deadline_ns);
  api.lock().lock();
  TrimPools(device);
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return Guarded([&] { return CreateStream(ph, flags, 0); });
}
SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  return Guarded([&] { return CreateStream(ph, flags, priority); });
}
SIM_EXPORT CUresult cuStreamDestroy(CUstream s) { return Guarded([&] { return DestroyStream(s); }); }
SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream s) { return Guarded([&] { return DestroyStream(s); }); }
SIM_EXPORT CUresult cuStreamSynchronize(CUstream s) { return Guarded([&] { return StreamSynchronize(s, false); }); }
SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return Guarded([&] { return StreamSynchronize(s, true); }); }
SIM_EXPORT CUresult cuStreamQuery(CUstream s) { return Guarded([&] { return StreamQuery(s, false); }); }
SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) { return Guarded([&] { return StreamQuery(s, true); }); }
SIM_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  return Guarded([&] { return StreamWaitEvent(s, e, flags, false); });
}
SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  return Guarded([&] { return StreamWaitEvent(s, e, flags, true); });
}

SIM_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext* pctx) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Stream* stream = nullptr;
    if (const CUresult rc = ResolveStream(s, false, &stream); rc != CUDA_SUCCESS) return rc;
    *pctx = reinterpret_cast<CUcontext>(stream->ctx);
    return CUDA_SUCCESS;
  });
}
SIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext* pctx) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Stream* stream = nullptr;
    if (const CUresult rc = ResolveStream(s, true, &stream); rc != CUDA_SUCCESS) return rc;
    *pctx = reinterpret_cast<CUcontext>(stream->ctx);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  return Guarded([&] {
    Api api;
    Context* ctx = nullptr;
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (ph == nullptr || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
    auto* event = NewHandle<Event>(HandleType::kEvent);
    event->ctx = ctx;
    event->flags = flags;
    *ph = reinterpret_cast<CUevent>(event);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { return Guarded([&] { return EventRecord(e, s, 0, false); }); }
SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return Guarded([&] { return EventRecord(e, s, 0, true); }); }
SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  return Guarded([&] { return EventRecord(e, s, flags, false); });
}
SIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags) {
  return Guarded([&] { return EventRecord(e, s, flags, true); });
}

SIM_EXPORT CUresult cuEventQuery(CUevent handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const Event* event = Lookup<Event>(handle, HandleType::kEvent);
    if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    return (!event->recorded || vgpusim::NowNs() >= event->time_ns) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const Event* event = Lookup<Event>(handle, HandleType::kEvent);
    if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (event->recorded) WaitAndTrim(api, event->ctx->device, event->time_ns);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return Guarded([&] { return ElapsedTime(ms, start, end); });
}
SIM_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return Guarded([&] { return ElapsedTime(ms, start, end); });
}
SIM_EXPORT CUresult cuEventDestroy(CUevent e) { return Guarded([&] { return DestroyEvent(e); }); }
SIM_EXPORT CUresult cuEventDestroy_v2(CUevent e) { return Guarded([&] { return DestroyEvent(e); }); }
