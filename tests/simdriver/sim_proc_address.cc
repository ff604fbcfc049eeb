// TEST DOUBLE ONLY: cuGetProcAddress(_v2) of the simulated driver, driven by sim_cuda_exports.def.
//
// A base name resolves to the newest row whose version is <= the caller's cudaVersion. With
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the _ptsz/_ptds row is chosen when it is at least
// as new as the newest default-stream row (a per-thread row never stands in for a newer ABI).
#include <cstring>
#include <type_traits>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// Every row's symbol must have exactly the ABI of its cudaTypedefs.h typedef.
#define SIM_CUDA_ENTRY(base, version, suffix, symbol)                                    \
  static_assert(std::is_same_v<decltype(&symbol), PFN_##base##_v##version##suffix>, \
                #symbol " does not match PFN_" #base "_v" #version #suffix);
#include "sim_cuda_exports.def"
#undef SIM_CUDA_ENTRY

struct ProcEntry {
  const char* base;
  int version;
  bool per_thread;
  void* function;
};

const ProcEntry kProcTable[] = {
#define SIM_CUDA_ENTRY(base, version, suffix, symbol) \
  {#base, version, sizeof(#suffix) > 1, reinterpret_cast<void*>(&symbol)},
#include "sim_cuda_exports.def"
#undef SIM_CUDA_ENTRY
};

CUresult GetProc(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  const cuuint64_t known_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~known_flags) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool known = false;
  const ProcEntry* newest = nullptr;
  const ProcEntry* newest_per_thread = nullptr;
  for (const ProcEntry& entry : kProcTable) {
    if (std::strcmp(entry.base, symbol) != 0) continue;
    known = true;
    if (entry.version > cuda_version) continue;
    const ProcEntry*& best = entry.per_thread ? newest_per_thread : newest;
    if (best == nullptr || entry.version > best->version) best = &entry;
  }
  const ProcEntry* chosen = newest;
  if (per_thread && newest_per_thread != nullptr && (newest == nullptr || newest_per_thread->version >= newest->version)) {
    chosen = newest_per_thread;
  }
  CUdriverProcAddressQueryResult result = CU_GET_PROC_ADDRESS_SUCCESS;
  if (!known) {
    result = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  } else if (chosen == nullptr) {
    result = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  } else {
    *pfn = chosen->function;
  }
  if (status != nullptr) *status = result;
  return result == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace
}  // namespace vgpusim::cuda

// Both work before cuInit, as the driver's do (the runtime resolves cuInit through them).
SIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return vgpusim::cuda::GetProc(symbol, pfn, cudaVersion, flags, nullptr);
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  return vgpusim::cuda::GetProc(symbol, pfn, cudaVersion, flags, symbolStatus);
}
