// Suite cuda: the trivial kernel runs on a GPU (skipped without one).
#include <doctest/doctest.h>

#include "tensor/device.h"
#ifdef MINIDL_TEST_WITH_CUDA
#include "tensor/cuda/runtime/device.h"
#endif

TEST_SUITE("cuda") {
  TEST_CASE("cuda device_count and smoke kernel") {
    REQUIRE(minidl::device_count(minidl::DeviceType::cuda) > 0);
#ifdef MINIDL_TEST_WITH_CUDA
    auto v = minidl::cuda::smoke_iota(1000, 3.0f);
    REQUIRE(v.size() == 1000);
    CHECK(v[0] == 3.0f);
    CHECK(v[999] == 1002.0f);
#endif
  }
}

TEST_CASE("device_count never throws and cpu counts one") {
  CHECK(minidl::device_count(minidl::DeviceType::cpu) == 1);
  int n = minidl::device_count(minidl::DeviceType::cuda);
  CHECK(n >= 0);
}
