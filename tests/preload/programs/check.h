// Tiny assertion helpers for the preload test programs: a failed check prints where and why on
// stderr and exits 1, so the harness sees a failure whatever the program was doing.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

#define CHECK_CU(expr)                                                                  \
  do {                                                                                  \
    CUresult check_cu_result_ = (expr);                                                 \
    if (check_cu_result_ != CUDA_SUCCESS) {                                             \
      std::fprintf(stderr, "CHECK_CU failed at %s:%d: %s returned %d\n", __FILE__,      \
                   __LINE__, #expr, static_cast<int>(check_cu_result_));                \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
