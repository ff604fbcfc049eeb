// Real-GPU check, layer 1: a program linked against libcuda.so.1 that calls exported driver
// symbols directly. Computes deterministic results on the GPU and prints them; run.sh compares
// the output with and without libvgpu.so.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(expr)                                                                      \
  do {                                                                                \
    CUresult ck_result_ = (expr);                                                     \
    if (ck_result_ != CUDA_SUCCESS) {                                                 \
      const char* ck_name_ = "?";                                                     \
      cuGetErrorName(ck_result_, &ck_name_);                                          \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, ck_name_); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

namespace {

// y[i] = a * x[i] + y[i]
const char kPtx[] = R"PTX(
.version 7.0
.target sm_75
.address_size 64
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<5>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  ld.param.f32 %f1, [a];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mul.wide.u32 %rd5, %r5, 4;
  add.s64 %rd6, %rd3, %rd5;
  add.s64 %rd7, %rd4, %rd5;
  ld.global.f32 %f2, [%rd6];
  ld.global.f32 %f3, [%rd7];
  fma.rn.f32 %f4, %f1, %f2, %f3;
  st.global.f32 [%rd7], %f4;
DONE:
  ret;
}
)PTX";

}  // namespace

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  size_t free_bytes = 0, total_info = 0;
  CK(cuMemGetInfo(&free_bytes, &total_info));
  std::printf("cuDeviceTotalMem == cuMemGetInfo total: %s\n", total == total_info ? "yes" : "no");

  const unsigned n = 1 << 22;
  std::vector<float> x(n), y(n);
  for (unsigned i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.001f;
    y[i] = static_cast<float>(i % 7);
  }
  CUdeviceptr dx, dy;
  CK(cuMemAlloc(&dx, n * sizeof(float)));
  CK(cuMemAlloc(&dy, n * sizeof(float)));
  CK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  CUmodule module;
  CK(cuModuleLoadData(&module, kPtx));
  CUfunction saxpy;
  CK(cuModuleGetFunction(&saxpy, module, "saxpy"));
  float a = 2.5f;
  unsigned count = n;
  void* params[] = {&dx, &dy, &a, &count};
  for (int rep = 0; rep < 10; ++rep) {
    CK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  }
  CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("saxpy x10 checksum %.6f\n", sum);

  // Stream-ordered allocation and a cooperative-capable launch path through cuLaunchKernelEx.
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr async_ptr;
  CK(cuMemAllocAsync(&async_ptr, 64 << 20, stream));
  CK(cuMemsetD8Async(async_ptr, 1, 64 << 20, stream));
  CK(cuMemFreeAsync(async_ptr, stream));
  CUlaunchConfig config{};
  config.gridDimX = (n + 255) / 256;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 256;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  CK(cuLaunchKernelEx(&config, saxpy, params, nullptr));
  CK(cuStreamSynchronize(stream));
  CK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  sum = 0;
  for (float v : y) sum += v;
  std::printf("cuLaunchKernelEx checksum %.6f\n", sum);

  CK(cuMemFree(dx));
  CK(cuMemFree(dy));
  CK(cuStreamDestroy(stream));
  CK(cuModuleUnload(module));
  CK(cuDevicePrimaryCtxRelease(dev));
  std::printf("driver api done\n");
  return 0;
}
