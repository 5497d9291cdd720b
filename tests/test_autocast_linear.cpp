// nn.Linear under autocast with f32 parameters (autograd/functions/linalg.cpp): dW and db go to
// the f32 weight and bias straight from the GEMM's f32 accumulator (linear_weight_grad_into),
// checked against an f64 product of the same 16-bit operands, against the unfused path
// (MINIDL_UNFUSED=autocast_linear: 16-bit gradients, then a cast node each), and on CUDA.
#include <doctest/doctest.h>

#include <cmath>

#include "tensor/linear_weight_grad.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

struct LinearGrads {
  Tensor out, gx, gw, gb;
  int64_t dispatches = 0;
};

// y = linear(x, w, b) under bf16 (or f16) autocast on `dev`, then y.backward(gy).
LinearGrads run_linear(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy,
                       DType low, Device dev) {
  // fresh leaves (to() on the same device would hand back the caller's tensor)
  Tensor x = x0.to(dev).clone().requires_grad_(), w = w0.to(dev).clone().requires_grad_(),
         b = b0.to(dev).clone().requires_grad_();
  LinearGrads r;
  amp::clear_autocast_cache();  // no batched weight copies left from another run's region
  r.dispatches = dispatches_of([&] {
    {
      amp::autocast ac(dev.type, low);
      r.out = linear(x, w, b);
    }
    r.out.backward(gy.to(dev).to(r.out.dtype()));
  });
  r.gx = x.grad().cpu(), r.gw = w.grad().cpu(), r.gb = b.grad().cpu(), r.out = r.out.cpu();
  return r;
}

}  // namespace

TEST_CASE("autocast linear: f32 dW and db from the f32 accumulator, one dispatch per tensor less") {
  for (DType low : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(low));
    // x:[2,37,48] w:[24,48] b:[24]; values exact in the 16-bit dtype so the casts are exact
    const Tensor x = random_tensor({2, 37, 48}, low, 1, -1, 1).to(kFloat32);
    const Tensor w = random_tensor({24, 48}, low, 2, -1, 1).to(kFloat32);
    const Tensor b = random_tensor({24}, low, 3, -1, 1).to(kFloat32);
    const Tensor gy = random_tensor({2, 37, 24}, low, 4, -1, 1).to(kFloat32);
    const LinearGrads fused = run_linear(x, w, b, gy, low, kCPU);
    LinearGrads old;
    {
      ScopedUnfused u("autocast_linear");
      old = run_linear(x, w, b, gy, low, kCPU);
    }
    CHECK(fused.gw.dtype() == kFloat32);
    CHECK(fused.gb.dtype() == kFloat32);
    // the forward and dX are the same ops on the same 16-bit operands
    CHECK(bitwise_equal(fused.out, old.out));
    CHECK(bitwise_equal(fused.gx, old.gx));
    // dW = gy^T x and db = colsum(gy) of the 16-bit operands, exactly in f64: the fused path
    // keeps the f32 accumulator (f32 rounding), the old one rounds to 16 bits first
    const Tensor gy2 = gy.to(low).to(kFloat64).reshape({-1, 24});
    const Tensor x2 = x.to(low).to(kFloat64).reshape({-1, 48});
    const Tensor gw_ref = matmul(gy2.t(), x2), gb_ref = sum(gy2, {0});
    check_close(fused.gw, gw_ref, 1e-6, 1e-6 * largest_magnitude(gw_ref));
    check_close(fused.gb, gb_ref, 1e-6, 1e-6 * largest_magnitude(gb_ref));
    const double ulp16 = low == kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    check_close(old.gw, gw_ref, ulp16, ulp16 * largest_magnitude(gw_ref));
    const double err_fused = largest_magnitude(fused.gw.to(kFloat64) - gw_ref);
    const double err_old = largest_magnitude(old.gw.to(kFloat64) - gw_ref);
    CHECK(err_fused < err_old);  // the 16-bit rounding of dW is gone
    // the cast nodes of w and b do not run: one dispatch each fewer
    CHECK(fused.dispatches == old.dispatches - 2);
  }
}

TEST_CASE("autocast linear: applies to f32 parameters only, and a frozen weight gets no grad") {
  const Tensor x = random_tensor({5, 8}, kBFloat16, 5).to(kFloat32).requires_grad_();
  // a bf16 weight (model.to(bf16)): the ordinary path, bf16 gradients
  Tensor wb = random_tensor({3, 8}, kBFloat16, 6).requires_grad_();
  {
    Tensor y;
    {
      amp::autocast ac(DeviceType::cpu);
      y = linear(x, wb);
    }
    sum(y).backward();
  }
  CHECK(wb.grad().dtype() == kBFloat16);
  // a frozen f32 weight with a trainable bias: x and b get gradients, w none
  Tensor wf = random_tensor({3, 8}, kFloat32, 7);
  Tensor b = random_tensor({3}, kFloat32, 8).requires_grad_();
  Tensor x2 = x.detach().requires_grad_();
  {
    Tensor y;
    {
      amp::autocast ac(DeviceType::cpu);
      y = linear(x2, wf, b);
    }
    sum(y).backward();
  }
  CHECK_FALSE(wf.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(b.grad().dtype() == kFloat32);
  check_close(b.grad(), full({3}, 5.0, kFloat64), 0, 0);
  CHECK(x2.grad().defined());
}

TEST_CASE("autocast linear: a GPT block trains like the unfused path under bf16 autocast") {
  auto grads_of = [](const std::string& unfused) {
    ScopedUnfused u(unfused);
    Generator gen(11);
    nn::TransformerBlock block(32, 4, 0.0, true, &gen);
    Tensor x = random_tensor({2, 9, 32}, kFloat32, 12);
    Tensor y;
    {
      amp::autocast ac(DeviceType::cpu);
      y = block.forward(x);
    }
    sum(y.to(kFloat32) * random_tensor({2, 9, 32}, kFloat32, 13)).backward();
    std::vector<Tensor> g;
    for (const Tensor& p : block.parameters()) g.push_back(p.grad());
    return g;
  };
  const std::vector<Tensor> fused = grads_of(""), old = grads_of("autocast_linear");
  REQUIRE(fused.size() == old.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fused[i].defined());
    CHECK(fused[i].dtype() == kFloat32);
    // the same gradients up to the 16-bit rounding the old path applied to dW, db and dX
    check_close(fused[i], old[i].to(kFloat64), 2e-2, 2e-2 * largest_magnitude(old[i]));
  }
}

TEST_CASE("linear_weight_grad_into: dtype and shape checks name the buffers") {
  const Tensor g = random_tensor({4, 3}, kBFloat16, 1), x = random_tensor({4, 5}, kBFloat16, 2);
  Tensor gw = empty({3, 5}, kFloat64), gb;
  CHECK_THROWS_WITH_AS(native::linear_weight_grad_into(g, x, gw, gb),
                       doctest::Contains("expected grad_w a contiguous [3, 5] tensor of bfloat16 "
                                         "or float32"),
                       Error);
  Tensor gw32 = empty({3, 5}, kFloat32), gb16 = empty({3}, kBFloat16);
  CHECK_THROWS_WITH_AS(native::linear_weight_grad_into(g, x, gw32, gb16),
                       doctest::Contains("expected grad_b a contiguous [3] tensor of float32"),
                       Error);
  Tensor gb32 = empty({3}, kFloat32);
  native::linear_weight_grad_into(g, x, gw32, gb32);
  check_close(gw32, matmul(g.to(kFloat64).t(), x.to(kFloat64)), 1e-6, 1e-6);
}

TEST_SUITE("cuda_autocast_linear") {
  TEST_CASE("cuda autocast linear: f32 dW and db from a bf16/f16 GEMM equal the CPU's") {
    for (DType low : {kBFloat16, kFloat16}) {
      CAPTURE(dtype_name(low));
      // GPT-2's c_fc at a small batch: x:[4,64,768] w:[3072,768]
      const Tensor x = random_tensor({4, 64, 768}, low, 21, -1, 1).to(kFloat32);
      const Tensor w = random_tensor({3072, 768}, low, 22, -0.1, 0.1).to(kFloat32);
      const Tensor b = random_tensor({3072}, low, 23, -1, 1).to(kFloat32);
      const Tensor gy = random_tensor({4, 64, 3072}, low, 24, -1, 1).to(kFloat32);
      const LinearGrads cpu = run_linear(x, w, b, gy, low, kCPU);
      const LinearGrads gpu = run_linear(x, w, b, gy, low, kCUDA);
      CHECK(gpu.gw.dtype() == kFloat32);
      check_close(gpu.gw, cpu.gw.to(kFloat64), 1e-5, 1e-5 * largest_magnitude(cpu.gw));
      check_close(gpu.gb, cpu.gb.to(kFloat64), 1e-5, 1e-5 * largest_magnitude(cpu.gb));
      const double ulp16 = low == kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
      check_close(gpu.gx, cpu.gx.to(kFloat64), 2 * ulp16, 2 * ulp16 * largest_magnitude(cpu.gx));
    }
  }

  TEST_CASE("cuda linear_weight_grad_into: widened output without a bias, and with no rows") {
    const Tensor g = random_tensor({33, 40}, kBFloat16, 31).to(kCUDA);
    const Tensor x = random_tensor({33, 24}, kBFloat16, 32).to(kCUDA);
    Tensor gw = empty({40, 24}, kFloat32, kCUDA), none;
    native::linear_weight_grad_into(g, x, gw, none);
    check_close(gw.cpu(), matmul(g.cpu().to(kFloat64).t(), x.cpu().to(kFloat64)), 1e-6, 1e-5);
    const Tensor g0 = empty({0, 40}, kBFloat16, kCUDA), x0 = empty({0, 24}, kBFloat16, kCUDA);
    Tensor gb = full({40}, 7.0, kFloat32, kCUDA);
    native::linear_weight_grad_into(g0, x0, gw, gb);
    CHECK(largest_magnitude(gw.cpu()) < 1e-29);
    CHECK(largest_magnitude(gb.cpu()) < 1e-29);
  }
}
