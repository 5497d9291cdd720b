// Op coverage: every op in tensor/op_list.def has a CPU kernel and, in a build with the CUDA
// backend, a CUDA kernel (registration needs no GPU); a missing kernel throws a message naming
// the op and the device.
#include <doctest/doctest.h>

#include <string>

#include "tensor/dispatch.h"

using namespace minidl;

TEST_CASE("every op in op_list.def has a CPU kernel") {
  for (int i = 0; i < kNumOps; ++i) {
    Op op = Op(i);
    CAPTURE(op_name(op));
    CHECK(has_kernel(op, DeviceType::cpu));
  }
}

#ifdef MINIDL_TEST_WITH_CUDA
TEST_CASE("every op in op_list.def has a CUDA kernel in a CUDA build") {
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    Op op = Op(i);
    CAPTURE(op_name(op));
    CHECK(has_kernel(op, DeviceType::cuda));
    if (!has_kernel(op, DeviceType::cuda)) missing += " " + std::string(op_name(op));
  }
  INFO("ops without a CUDA kernel:", missing);
  CHECK(missing.empty());
}
#endif

TEST_CASE("a missing kernel names the op and the device") {
  if (has_kernel(Op::gelu, DeviceType::cuda)) return;  // the CUDA backend has it
  CHECK_THROWS_WITH_AS(kernel<Op::gelu>(kCUDA), "op `gelu` has no CUDA kernel", Error);
}
