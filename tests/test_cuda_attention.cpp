// Suite cuda_attention: the fused CUDA scaled_dot_product_attention (forward and backward)
// against the CPU composite (matmul/softmax) path: causal and not, bool and float masks,
// f32/f64/bf16/f16, L and S not multiples of the tiles, head dims 32/64/128, dropout streams.
#include <doctest/doctest.h>

#include <cmath>

#include "tensor/cuda.h"
#include "autograd/ops.h"
#include "test_util.h"

using namespace minidl;
using testutil::check_close;
using testutil::random_tensor;

namespace {

const Device kGpu{DeviceType::cuda, 0};

struct Out {
  Tensor out, gq, gk, gv;
};

// out and the gradients of sum(out * gout), all returned on the CPU.
template <typename Fn>
Out run(Fn fn, Device dev, const Tensor& q0, const Tensor& k0, const Tensor& v0,
        const Tensor& gout) {
  Tensor q = q0.to(dev).requires_grad_(true), k = k0.to(dev).requires_grad_(true);
  Tensor v = v0.to(dev).requires_grad_(true);
  Tensor out = fn(q, k, v);
  sum(out * gout.to(dev).to(out.dtype())).backward();
  return {out.detach().to(kCPU), q.grad().to(kCPU), k.grad().to(kCPU), v.grad().to(kCPU)};
}

// |a - b| <= tol * (|b| + max|b|) elementwise, per tensor.
void near(const Tensor& a, const Tensor& b, double tol) {
  const Tensor bf = b.to(kFloat64);
  const double mx = amax(abs(bf), {}).item<double>();
  check_close(a.to(kFloat64), bf, tol, tol * mx);
}

double tol_for(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-10;
    case DType::f32:
      return 2e-5;
    case DType::bf16:
      return 2 * std::ldexp(1.0, -8);
    default:  // f16
      return 2 * std::ldexp(1.0, -11);
  }
}

}  // namespace

TEST_SUITE("cuda_attention") {
  TEST_CASE("cuda_attention: fused CUDA matches the CPU composite (dtypes, head dims, masks)") {
    struct C {
      int64_t L, S, E;
      bool causal;
      int mask;  // 0 none, 1 bool, 2 float
    };
    const C cases[] = {{77, 45, 32, false, 0},  {77, 77, 64, true, 0},  {33, 130, 128, true, 0},
                       {64, 64, 32, false, 1},  {50, 93, 64, false, 2}, {1, 1, 32, true, 0},
                       {129, 129, 128, true, 1}};
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (const C& c : cases) {
        CAPTURE(dt);
        CAPTURE(c.L);
        CAPTURE(c.S);
        CAPTURE(c.E);
        CAPTURE(c.causal);
        CAPTURE(c.mask);
        const int64_t B = 2, H = 3;
        Tensor q = random_tensor({B, H, c.L, c.E}, dt, 1, -1.5, 1.5);
        Tensor k = random_tensor({B, H, c.S, c.E}, dt, 2, -1.5, 1.5);
        Tensor v = random_tensor({B, H, c.S, c.E}, dt, 3, -1.5, 1.5);
        Tensor gout = random_tensor({B, H, c.L, c.E}, dt, 4, -1, 1);
        Tensor mask;
        if (c.mask == 1)
          mask = logical_or(lt(random_tensor({c.L, c.S}, kFloat32, 5, 0, 1), Scalar(0.7)),
                            eq(arange(c.S).unsqueeze(0), Scalar(0)));
        if (c.mask == 2) mask = random_tensor({B, 1, c.L, c.S}, kFloat32, 6, -2, 2);
        const Tensor gmask = mask.defined() ? mask.to(kGpu) : mask;
        Out g = run(
            [&](const Tensor& a, const Tensor& b, const Tensor& d) {
              return scaled_dot_product_attention(a, b, d, gmask, 0.0, c.causal);
            },
            kGpu, q, k, v, gout);
        // reference: CPU composite in f32 (f64 for f64) on the same rounded inputs
        const DType rd = dt == kFloat64 ? kFloat64 : kFloat32;
        Out r = run(
            [&](const Tensor& a, const Tensor& b, const Tensor& d) {
              return scaled_dot_product_attention_math(a, b, d, mask, 0.0, c.causal);
            },
            kCPU, q.to(rd), k.to(rd), v.to(rd), gout.to(rd));
        CHECK(g.out.dtype() == dt);
        const double tol = tol_for(dt);
        near(g.out, r.out, tol);
        near(g.gq, r.gq, tol);
        near(g.gk, r.gk, tol);
        near(g.gv, r.gv, tol);
      }
    }
  }

  TEST_CASE("cuda_attention: dropout draws the CPU kernel's mask, fully masked rows give 0") {
    Tensor q = random_tensor({2, 2, 70, 32}, kFloat32, 1, -1, 1);
    Tensor k = random_tensor({2, 2, 66, 32}, kFloat32, 2, -1, 1);
    Tensor v = random_tensor({2, 2, 66, 32}, kFloat32, 3, -1, 1);
    Tensor gout = random_tensor({2, 2, 70, 32}, kFloat32, 4, -1, 1);
    for (bool causal : {false, true}) {
      Generator g1(5), g2(5);
      Out a = run(
          [&](const Tensor& x, const Tensor& y, const Tensor& z) {
            return scaled_dot_product_attention(x, y, z, {}, 0.2, causal, {}, &g1);
          },
          kGpu, q, k, v, gout);
      Out b = run(
          [&](const Tensor& x, const Tensor& y, const Tensor& z) {
            return scaled_dot_product_attention(x, y, z, {}, 0.2, causal, {}, &g2);
          },
          kCPU, q, k, v, gout);
      near(a.out, b.out, 2e-5);
      near(a.gq, b.gq, 2e-5);
      near(a.gk, b.gk, 2e-5);
      near(a.gv, b.gv, 2e-5);
    }
    Tensor mask = ones({70, 66}, kBool);
    mask.narrow(0, 3, 1).fill_(false);
    Tensor o = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), mask.to(kGpu));
    check_close(o.to(kCPU).narrow(2, 3, 1), std::vector<double>(2 * 2 * 32, 0.0));
  }

  TEST_CASE("cuda_attention: head dims above 128 take the composite path") {
    Tensor q = random_tensor({2, 9, 160}, kFloat32, 1, -1, 1);
    Tensor k = random_tensor({2, 11, 160}, kFloat32, 2, -1, 1);
    Tensor v = random_tensor({2, 11, 160}, kFloat32, 3, -1, 1);
    Tensor g = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, 0.0, true);
    near(g.to(kCPU), scaled_dot_product_attention(q, k, v, {}, 0.0, true), 2e-5);
  }
}
