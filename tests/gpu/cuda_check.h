// RT / DRV: every CUDA call of the real-GPU test programs is checked; a failure prints the call,
// where it was and the error's name on stderr and exits 1 (setup failures are never data). And
// InstantiateGraph, for programs built with every runtime of tests/gpu/compat.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define RT(expr)                                                                                   \
  do {                                                                                             \
    const cudaError_t rt_err_ = (expr);                                                            \
    if (rt_err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                    \
                   cudaGetErrorName(rt_err_));                                                     \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

#define DRV(expr)                                                                                  \
  do {                                                                                             \
    const CUresult drv_err_ = (expr);                                                              \
    if (drv_err_ != CUDA_SUCCESS) {                                                                \
      const char* name_ = nullptr;                                                                 \
      cuGetErrorName(drv_err_, &name_);                                                            \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                    \
                   name_ != nullptr ? name_ : "?");                                                \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// cudaGraphInstantiate as the runtime the program is built with declares it: CUDA 12 made the
// flags its third argument; the 11.x runtimes take an error node and a log buffer (and reach the
// driver through cuGraphInstantiate_v2, tests/gpu/compat/README.md).
inline cudaError_t InstantiateGraph(cudaGraphExec_t* exec, cudaGraph_t graph) {
#if CUDART_VERSION >= 12000
  return cudaGraphInstantiate(exec, graph, 0);
#else
  return cudaGraphInstantiate(exec, graph, nullptr, nullptr, 0);
#endif
}
