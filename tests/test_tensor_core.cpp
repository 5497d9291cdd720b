// Core tensor tests: metadata, views sharing storage, contiguous/clone, copy with cast,
// fill, dtype conversions (f16/bf16 round-to-nearest-even), item/at, promotion.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "minidl.h"

using namespace minidl;

static Tensor iota(const Shape& s, DType dt = kFloat32) {
  Tensor t = empty(s, kFloat64);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = double(i);
  return t.to(dt);
}

TEST_CASE("empty, shape and contiguous strides") {
  Tensor t = empty({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.is_contiguous());
  CHECK(t.size(-1) == 4);
  CHECK_THROWS_WITH_AS(t.size(3), doctest::Contains("dimension out of range"), Error);
  CHECK(empty({0, 5}).numel() == 0);
  CHECK_THROWS_AS(empty({-1}), Error);
}

TEST_CASE("views share storage and index correctly") {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.shares_storage(t));
  CHECK(!p.is_contiguous());
  CHECK(p.at({3, 1, 2}) == t.at({1, 2, 3}));
  Tensor tr = t.transpose(0, 2);
  CHECK(tr.at({3, 2, 1}) == 23.0);
  Tensor s = t.slice(2, 1, 4, 2);
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.at({1, 1, 1}) == t.at({1, 1, 3}));
  Tensor n = t.narrow(1, 1, 2);
  CHECK(n.at({0, 0, 0}) == 4.0);
  Tensor sel = t.select(1, -1);
  CHECK(sel.shape() == Shape{2, 4});
  CHECK(sel.at({1, 0}) == 20.0);
  CHECK(t[1].at({0, 0}) == 12.0);
  Tensor e = iota({3, 1}).expand({2, 3, 4});
  CHECK(e.strides() == Strides{0, 1, 0});
  CHECK(e.at({1, 2, 3}) == 2.0);
  CHECK(t.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  CHECK(t.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(t.unsqueeze(0).squeeze().shape() == Shape{2, 3, 4});
  CHECK(t.flatten(1).shape() == Shape{2, 12});
  CHECK(t.flatten().shape() == Shape{24});
  CHECK(t.view({4, -1}).shape() == Shape{4, 6});
  CHECK(t.unflatten(2, {2, 2}).shape() == Shape{2, 3, 2, 2});
  // writes through a view are visible in the base
  t.select(0, 1).select(0, 2).fill_(-1.0);
  CHECK(t.at({1, 2, 0}) == -1.0);
  CHECK(t.at({1, 2, 3}) == -1.0);
  CHECK(t.at({1, 1, 3}) == 19.0);
}

TEST_CASE("view needs compatible strides and reshape copies when it must") {
  Tensor t = iota({2, 3});
  Tensor tt = t.t();
  CHECK_THROWS_WITH_AS(tt.view({6}), doctest::Contains("reshape"), Error);
  Tensor r = tt.reshape({6});
  CHECK(!r.shares_storage(t));
  CHECK(r.at({1}) == 3.0);
  CHECK(t.reshape({3, 2}).shares_storage(t));
  CHECK_THROWS_WITH_AS(t.view({4, 2}), doctest::Contains("invalid for input of size 6"), Error);
}

TEST_CASE("contiguous, clone and copy_ with cast") {
  Tensor t = iota({3, 4});
  Tensor c = t.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.at({3, 2}) == 11.0);
  Tensor cl = t.clone();
  CHECK(!cl.shares_storage(t));
  Tensor d = empty({3, 4}, kFloat64);
  d.copy_(t);
  CHECK(d.at({2, 3}) == 11.0);
  Tensor b = empty({2, 3, 4}, kInt32);
  b.copy_(t);  // broadcast copy
  CHECK(b.at({1, 2, 3}) == 11.0);
  CHECK_THROWS_WITH_AS(empty({5}).copy_(t), doctest::Contains("not broadcastable"), Error);
}

TEST_CASE("casts between every dtype pair") {
  const DType all[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool};
  Tensor src = iota({5}, kFloat64);  // 0..4 exact in every dtype (bool: 0 vs nonzero)
  for (DType a : all)
    for (DType b : all) {
      CAPTURE(dtype_name(a));
      CAPTURE(dtype_name(b));
      Tensor x = src.to(a).to(b).to(kFloat64);
      for (int64_t i = 0; i < 5; ++i) {
        double expect = (a == kBool || b == kBool) ? (i != 0) : double(i);
        CHECK(x.at({i}) == expect);
      }
    }
}

TEST_CASE("f16 and bf16 round to nearest even") {
  // 1 + 2^-11 is halfway between 1 and 1+2^-10 in f16: ties to even -> 1
  CHECK(float(Half(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: ties to even -> 1+2^-9
  CHECK(float(Half(1.0f + 3 * std::ldexp(1.0f, -11))) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(float(Half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(float(Half(65520.0f))));
  CHECK(float(Half(65519.0f)) == 65504.0f);
  CHECK(float(Half(std::ldexp(1.0f, -24))) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(float(Half(std::ldexp(1.0f, -25))) == 0.0f);                   // tie -> even (0)
  CHECK(float(Half(std::ldexp(3.0f, -26))) == std::ldexp(1.0f, -24));
  CHECK(std::isnan(float(Half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(float(Half(-2.5f)) == -2.5f);
  // bf16: 1 + 2^-8 is halfway between 1 and 1+2^-7 -> 1; 1 + 3*2^-8 -> 1 + 2^-6
  CHECK(float(BFloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  CHECK(float(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // every f16 bit pattern survives a float round trip
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h = Half::from_bits(uint16_t(b));
    float f = float(h);
    if (std::isnan(f)) continue;
    REQUIRE(Half(f).bits == h.bits);
  }
}

TEST_CASE("item, at, fill and tolist") {
  Tensor t = empty({2, 2}, kInt64);
  t.fill_(7);
  CHECK(t.at({1, 1}) == 7.0);
  CHECK(t.select(0, 0).select(0, 1).item<int64_t>() == 7);
  CHECK_THROWS_WITH_AS(t.item(), doctest::Contains("4 elements"), Error);
  CHECK(iota({3}).tolist<float>() == std::vector<float>{0, 1, 2});
}

TEST_CASE("type promotion follows PyTorch") {
  CHECK(promote_types(kInt32, kFloat16) == kFloat16);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kUInt8, kInt32) == kInt32);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK(promote_types(kInt64, kFloat64) == kFloat64);
  Tensor i = empty({3}, kInt32), z = empty({}, kFloat64), h = empty({3}, kFloat16);
  CHECK(result_type(i, z) == kFloat64);  // 0-d float raises category
  CHECK(result_type(h, z) == kFloat16);  // same category: dimensioned wins
  CHECK(result_type(i, Scalar(2.5)) == kFloat32);
  CHECK(result_type(i, Scalar(2)) == kInt32);
  CHECK(result_type(empty({2}, kBool), Scalar(2)) == kInt64);
  CHECK(broadcast_shapes({3, 1, 5}, {4, 1}) == Shape{3, 4, 5});
  CHECK_THROWS_WITH_AS(broadcast_shapes({3}, {4}, "add"), doctest::Contains("op `add`"), Error);
}

TEST_CASE("Device parsing") {
  CHECK(Device("cuda:1").index == 1);
  CHECK(Device("cpu").is_cpu());
  CHECK(Device("cuda").str() == "cuda:0");
  CHECK_THROWS_AS(Device("gpu"), Error);
  CHECK_THROWS_AS(Device("cuda:x"), Error);
}

TEST_CASE("CPU allocator reuses large freed blocks and empty_cache releases them") {
  void* first = nullptr;
  {
    Tensor big = empty({1 << 19}, kFloat32);  // 2 MiB: cached size class
    first = big.data_ptr();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  }
  Tensor again = empty({1 << 19}, kFloat32);
  CHECK(again.data_ptr() == first);  // same block back, no fresh pages
  Tensor small = empty({3}, kFloat64);
  CHECK(reinterpret_cast<uintptr_t>(small.data_ptr()) % 64 == 0);
  empty_cache();
}

TEST_CASE("memory_stats count tensor storage bytes and the peak per device") {
  const int64_t base = memory_stats(kCPU).allocated;
  reset_peak_memory_stats(kCPU);
  CHECK(memory_stats(kCPU).peak == base);
  {
    Tensor a = zeros({1000}, kFloat32);  // 4000 bytes
    CHECK(memory_stats(kCPU).allocated == base + 4000);
    Tensor v = a.view({10, 100});  // views share the storage: nothing new
    Tensor b = zeros({250}, kFloat64);
    CHECK(memory_stats(kCPU).allocated == base + 6000);
  }
  CHECK(memory_stats(kCPU).allocated == base);
  CHECK(memory_stats(kCPU).peak == base + 6000);
  reset_peak_memory_stats(kCPU);
  CHECK(memory_stats(kCPU).peak == base);
  // Other devices have their own counters (no CUDA tensors were made here).
  CHECK(memory_stats(Device(DeviceType::cuda, 1)).allocated == 0);
}
