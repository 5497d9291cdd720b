// Suite cuda_attention: the fused CUDA scaled_dot_product_attention (forward and backward)
// against the CPU composite (matmul/softmax) path: causal and not, bool and float masks,
// f32/f64/bf16/f16, L and S not multiples of the tiles, head dims 8..128 (on and off the
// tensor-core tiles, Ev != E), no keys or no queries, dropout streams, CUDA graph capture.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "tensor/cuda_api.h"
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
  // detach(): a leaf of its own even where to() returns q0 itself (same device and dtype)
  Tensor q = q0.to(dev).detach().requires_grad_(true);
  Tensor k = k0.to(dev).detach().requires_grad_(true);
  Tensor v = v0.to(dev).detach().requires_grad_(true);
  Tensor out = fn(q, k, v);
  sum(out * gout.to(dev).to(out.dtype())).backward();
  return {out.detach().to(kCPU), q.grad().to(kCPU), k.grad().to(kCPU), v.grad().to(kCPU)};
}

// |a - b| <= tol * (|b| + max(max|b|, 0.1)) elementwise, per tensor. The floor: a gradient
// that cancels to exactly 0 in the reference (L = S = 1: dS = P (dP - rowsum(dO O)) = 0) keeps
// rounding-sized residues in the fused kernels, which sum dP and rowsum(dO O) in other orders.
void near(const Tensor& a, const Tensor& b, double tol) {
  CHECK(a.shape() == b.shape());
  if (b.numel() == 0) return;
  const Tensor bf = b.to(kFloat64);
  const double mx = std::max(amax(abs(bf), {}).item<double>(), 0.1);
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

// The fused CUDA op (forward and backward, q:[2,3,L,E] k:[2,3,S,E] v:[2,3,S,Ev]) against the CPU
// composite on the same rounded inputs, in f32 (f64 for f64). mask: 0 none, 1 bool, 2 float.
void check_vs_composite(DType dt, int64_t L, int64_t S, int64_t E, int64_t Ev, bool causal,
                        int mask_kind) {
  CAPTURE(dt);
  CAPTURE(L);
  CAPTURE(S);
  CAPTURE(E);
  CAPTURE(Ev);
  CAPTURE(causal);
  CAPTURE(mask_kind);
  const int64_t B = 2, H = 3;
  Tensor q = random_tensor({B, H, L, E}, dt, 1, -1.5, 1.5);
  Tensor k = random_tensor({B, H, S, E}, dt, 2, -1.5, 1.5);
  Tensor v = random_tensor({B, H, S, Ev}, dt, 3, -1.5, 1.5);
  Tensor gout = random_tensor({B, H, L, Ev}, dt, 4, -1, 1);
  Tensor mask;
  if (mask_kind == 1)
    mask = logical_or(lt(random_tensor({L, S}, kFloat32, 5, 0, 1), Scalar(0.7)),
                      eq(arange(S).unsqueeze(0), Scalar(0)));
  if (mask_kind == 2) mask = random_tensor({B, 1, L, S}, kFloat32, 6, -2, 2);
  const Tensor gmask = mask.defined() ? mask.to(kGpu) : mask;
  Out g = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        return scaled_dot_product_attention(a, b, d, gmask, 0.0, causal);
      },
      kGpu, q, k, v, gout);
  const DType rd = dt == kFloat64 ? kFloat64 : kFloat32;
  Out r = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        return scaled_dot_product_attention_math(a, b, d, mask, 0.0, causal);
      },
      kCPU, q.to(rd), k.to(rd), v.to(rd), gout.to(rd));
  CHECK(g.out.dtype() == dt);
  const double tol = tol_for(dt);
  near(g.out, r.out, tol);
  near(g.gq, r.gq, tol);
  near(g.gk, r.gk, tol);
  near(g.gv, r.gv, tol);
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
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16})
      for (const C& c : cases) check_vs_composite(dt, c.L, c.S, c.E, c.E, c.causal, c.mask);
  }

  // bf16/f16 at head dims 64 and 128 without masks run the flash (mma.sync) forward (and at 64
  // its backward); under MINIDL_UNFUSED=flash_ldmatrix with 32-bit fragment loads, under
  // flash_attention the WMMA kernels they replaced. Each against the composite, at lengths off
  // the 64-row and 32/64-key tiles and L != S.
  TEST_CASE("cuda_attention: the flash (mma.sync) and WMMA kernels both match the composite") {
    for (const char* unfused : {"", "flash_ldmatrix", "flash_attention"}) {
      CAPTURE(std::string(unfused));
      variants::set_unfused(unfused);
      for (DType dt : {kBFloat16, kFloat16}) {
        check_vs_composite(dt, 200, 200, 64, 64, true, 0);
        check_vs_composite(dt, 70, 150, 64, 64, false, 0);
        check_vs_composite(dt, 150, 70, 128, 128, true, 0);
      }
    }
    variants::set_unfused("");
  }

  // ldmatrix hands the mma.sync the same operands as the 32-bit loads: bitwise equal outputs and
  // gradients on the device (the host emulation shows the same, tests/warp_emulator.h).
  TEST_CASE("cuda_attention: flash kernels with ldmatrix equal the 32-bit fragment loads") {
    for (DType dt : {kBFloat16, kFloat16}) {
      for (int64_t E : {64, 128}) {
        CAPTURE(dt);
        CAPTURE(E);
        const Tensor q = random_tensor({2, 3, 150, E}, dt, 1, -1.5, 1.5);
        const Tensor k = random_tensor({2, 3, 130, E}, dt, 2, -1.5, 1.5);
        const Tensor v = random_tensor({2, 3, 130, E}, dt, 3, -1.5, 1.5);
        const Tensor gout = random_tensor({2, 3, 150, E}, dt, 4, -1, 1);
        Out o[2];
        for (int i = 0; i < 2; ++i) {
          variants::set_unfused(i == 0 ? "" : "flash_ldmatrix");
          o[i] = run(
              [&](const Tensor& a, const Tensor& b, const Tensor& d) {
                return scaled_dot_product_attention(a, b, d, Tensor(), 0.0, true);
              },
              kGpu, q, k, v, gout);
        }
        variants::set_unfused("");
        CHECK(equal(o[0].out, o[1].out));
        CHECK(equal(o[0].gq, o[1].gq));
        CHECK(equal(o[0].gk, o[1].gk));
        CHECK(equal(o[0].gv, o[1].gv));
      }
    }
  }

  // bf16/f16 with a head dim that is not a multiple of 16 take the FMA forward (the cases above
  // all run on tensor cores), so do head dims where the tensor-core tiles exceed the device's
  // shared memory (E = Ev = 128 on sm_86/89); v's head dim Ev != E in both kernels.
  TEST_CASE("cuda_attention: bf16/f16 off the tensor-core tiles and Ev != E match the composite") {
    struct C {
      int64_t L, S, E, Ev;
      bool causal;
      int mask;
    };
    const C cases[] = {{37, 70, 40, 24, false, 0},
                       {70, 37, 24, 48, true, 1},
                       {45, 66, 8, 8, false, 2},
                       {65, 90, 48, 32, true, 0},
                       {20, 33, 112, 128, false, 1}};
    for (DType dt : {kBFloat16, kFloat16, kFloat32})
      for (const C& c : cases) check_vs_composite(dt, c.L, c.S, c.E, c.Ev, c.causal, c.mask);
  }

  // No keys: every row attends nothing (out 0, lse +inf, dq 0); no queries: dk = dv = 0. The
  // backward's f32 workspaces are then empty (null data).
  TEST_CASE("cuda_attention: no keys (S = 0) or no queries (L = 0) match the CPU kernel") {
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (auto [L, S] : {std::pair<int64_t, int64_t>{5, 0}, {0, 7}}) {
        CAPTURE(dt);
        CAPTURE(L);
        CAPTURE(S);
        Tensor q = random_tensor({2, 3, L, 32}, dt, 1, -1, 1);
        Tensor k = random_tensor({2, 3, S, 32}, dt, 2, -1, 1);
        Tensor v = random_tensor({2, 3, S, 32}, dt, 3, -1, 1);
        Tensor gout = random_tensor({2, 3, L, 32}, dt, 4, -1, 1);
        auto fn = [](const Tensor& a, const Tensor& b, const Tensor& d) {
          return scaled_dot_product_attention(a, b, d, {}, 0.0, false);
        };
        Out g = run(fn, kGpu, q, k, v, gout), c = run(fn, kCPU, q, k, v, gout);
        near(g.out, c.out, 0);
        near(g.gq, c.gq, 0);
        near(g.gk, c.gk, 0);
        near(g.gv, c.gv, 0);
        const Tensor lse = native::scaled_dot_product_attention_forward(q.to(kGpu), k.to(kGpu),
                                                                        v.to(kGpu), SdpaParams{})
                               .lse;
        if (S == 0) CHECK(amin(lse.to(kCPU).to(kFloat64), {}).item<double>() == INFINITY);
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

  // A graph replays the fused op like the eager call; with dropout the op refuses capture (its
  // Philox (seed, offset) would be frozen: every replay would draw the captured mask again).
  TEST_CASE("cuda_attention: CUDA graphs replay the fused op and refuse its dropout") {
    for (DType dt : {kFloat32, kBFloat16}) {
      CAPTURE(dt);
      Tensor q = random_tensor({2, 3, 40, 64}, dt, 1, -1, 1).to(kGpu);
      Tensor k = random_tensor({2, 3, 50, 64}, dt, 2, -1, 1).to(kGpu);
      Tensor v = random_tensor({2, 3, 50, 64}, dt, 3, -1, 1).to(kGpu);
      cuda::synchronize();
      cuda::CUDAGraph g;
      g.capture_begin();
      std::string msg;
      try {
        (void)scaled_dot_product_attention(q, k, v, {}, 0.1, true);
      } catch (const Error& e) {
        msg = e.what();
      }
      Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
      g.capture_end();
      CHECK_MESSAGE(msg.find("cannot be captured in a CUDA graph") != std::string::npos, msg);
      q.copy_(random_tensor({2, 3, 40, 64}, dt, 7, -1, 1));
      g.replay();
      near(out.to(kCPU), scaled_dot_product_attention(q, k, v, {}, 0.0, true).to(kCPU), 0);
    }
  }

  TEST_CASE("cuda_attention: head dims above 128 take the composite path") {
    Tensor q = random_tensor({2, 9, 160}, kFloat32, 1, -1, 1);
    Tensor k = random_tensor({2, 11, 160}, kFloat32, 2, -1, 1);
    Tensor v = random_tensor({2, 11, 160}, kFloat32, 3, -1, 1);
    Tensor g = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, 0.0, true);
    near(g.to(kCPU), scaled_dot_product_attention(q, k, v, {}, 0.0, true), 2e-5);
  }
}
