// PTX for the example and benchmark kernels, JIT-compiled by the driver (no nvcc needed).
//
// sim_sleep_spin(u64 ns): spins on %globaltimer for `ns` nanoseconds. The simulated driver's
// convention (tests/simdriver/README.md) gives kernels named sim_sleep* exactly that duration,
// so the same program runs on a real GPU and on the test double.
// empty_kernel(): returns at once (launch-rate benchmark).
#pragma once

inline constexpr char kExamplePtx[] = R"PTX(
.version 7.0
.target sm_75
.address_size 64

.visible .entry sim_sleep_spin(.param .u64 ns)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [ns];
  mov.u64 %rd2, %globaltimer;
SPIN:
  mov.u64 %rd3, %globaltimer;
  sub.u64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p1, %rd4, %rd1;
  @%p1 bra SPIN;
  ret;
}

.visible .entry empty_kernel()
{
  ret;
}
)PTX";
