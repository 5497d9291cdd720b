// Op coverage: every op in tensor/ops.def has a CPU kernel; a missing kernel throws a
// message naming the op and the device.
#include <doctest/doctest.h>

#include "tensor/dispatch.h"

using namespace minidl;

TEST_CASE("every op in ops.def has a CPU kernel") {
  for (int i = 0; i < kNumOps; ++i) {
    Op op = Op(i);
    CAPTURE(op_name(op));
    CHECK(has_kernel(op, DeviceType::cpu));
  }
}

TEST_CASE("a missing kernel names the op and the device") {
  if (has_kernel(Op::gelu, DeviceType::cuda)) return;  // the CUDA backend has it
  CHECK_THROWS_WITH_AS(kernel<Op::gelu>(kCUDA), "op `gelu` has no CUDA kernel", Error);
}
