// CPU-vs-CUDA parity of the fused classifier loss (cuda_fused_cross_entropy; the CPU kernel is
// checked against the composite path in test_fused_cross_entropy.cpp): loss, in-place gradient
// and backward scale in f32/bf16/f16/f64, padded columns (vector and scalar row paths), ignored
// rows, NaN for all-ignored and bad targets, +inf for a +inf logit, and the autograd path.
#include <doctest/doctest.h>

#include <cmath>

#include "test_util.h"

using namespace minidl;
using namespace testutil;
namespace F = nn::functional;

namespace {

// int64 targets [N] in [0, V), with every `every`-th row ignore_index (-100) when every > 0.
Tensor make_targets(int64_t N, int64_t V, uint64_t seed, int64_t every) {
  Tensor t = random_tensor({N}, kInt64, seed, 0, double(V));
  for (int64_t i = 0; every > 0 && i < N; i += every) t.data_ptr<int64_t>()[i] = -100;
  return t;
}

}  // namespace

TEST_SUITE("cuda_fused_cross_entropy") {
  TEST_CASE("cuda fused_cross_entropy_: loss and in-place gradient equal the CPU kernel") {
    uint64_t seed = 100;
    struct Shape3 {
      int64_t N, V, Vp, every;
    };
    // Vp % 8 == 0 (16-byte rows: vector loads) and not; GPT-2's 50257 of 50304
    for (const Shape3 s : {Shape3{9, 13, 16, 4}, Shape3{6, 1000, 1027, 3}, Shape3{5, 7, 7, 0},
                           Shape3{17, 50257, 50304, 5}, Shape3{3, 4099, 4105, 2}}) {
      for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(s.Vp);
        const Tensor logits = random_tensor({s.N, s.Vp}, dt, seed, -6, 6);
        const Tensor target = make_targets(s.N, s.V, seed + 1, s.every);
        ++seed;
        Tensor cpu = logits.clone(), gpu = logits.to(kCUDA);
        const double lc = native::fused_cross_entropy_(cpu, target, s.V).item<double>();
        const Tensor lg = native::fused_cross_entropy_(gpu, target.to(kCUDA), s.V);
        CHECK(lg.device() == kCUDA);
        const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 1e-2;
        CHECK(lg.item<double>() == doctest::Approx(lc).epsilon(tol));
        check_close(gpu.cpu(), cpu.to(kFloat64), tol, tol * largest_magnitude(cpu));
        // the no-grad form leaves the logits alone and gives the same loss
        const Tensor keep = logits.to(kCUDA);
        CHECK(native::fused_cross_entropy(keep, target.to(kCUDA), s.V).item<double>() ==
              lg.item<double>());
        CHECK(equal(keep.cpu(), logits));
        // the backward's scale
        native::fused_cross_entropy_backward_(cpu, full({}, 3.0, kFloat32));
        native::fused_cross_entropy_backward_(gpu, full({}, 3.0, kFloat32, kCUDA));
        check_close(gpu.cpu(), cpu.to(kFloat64), tol, 3 * tol * largest_magnitude(cpu));
      }
    }
  }

  TEST_CASE("cuda fused_cross_entropy_: all ignored is NaN, bad targets NaN, autograd path") {
    Tensor g = random_tensor({4, 8}, kFloat32, 7).to(kCUDA);
    CHECK(std::isnan(
        native::fused_cross_entropy_(g, full({4}, -100, kInt64, kCUDA), 6).item<double>()));
    CHECK(equal(g.cpu(), zeros({4, 8})));
    Tensor b = random_tensor({2, 8}, kFloat32, 8).to(kCUDA);
    Tensor t = full({2}, 7, kInt64, kCUDA);  // in the padding: NaN on the device
    CHECK(std::isnan(native::fused_cross_entropy_(b, t, 6).item<double>()));
    // a +inf logit other than the target: the loss is +inf on both devices (not NaN)
    for (DType dt : {kFloat32, kBFloat16}) {
      Tensor xi = random_tensor({3, 8}, kFloat32, 11);
      xi.data_ptr<float>()[3] = INFINITY;  // row 0, column 3
      xi = xi.to(dt);
      const Tensor ti = full({3}, 1, kInt64);
      Tensor xc = xi.clone(), xg = xi.to(kCUDA);
      const double lc = native::fused_cross_entropy_(xc, ti, 6).item<double>();
      CHECK((std::isinf(lc) && lc > 0));
      CHECK(native::fused_cross_entropy_(xg, ti.to(kCUDA), 6).item<double>() == lc);
    }
    // through autograd: a non-leaf bf16 head output, loss * 2
    const Tensor x0 = random_tensor({6, 40}, kBFloat16, 9);
    const Tensor target = make_targets(6, 33, 10, 4);
    Tensor wc = ones({6, 40}, kBFloat16).requires_grad_();
    Tensor wg = ones({6, 40}, kBFloat16, kCUDA).requires_grad_();
    mul(F::fused_cross_entropy_(mul(x0, wc), target, 33), 2.0).backward();
    mul(F::fused_cross_entropy_(mul(x0.to(kCUDA), wg), target.to(kCUDA), 33), 2.0).backward();
    check_close(wg.grad().cpu(), wc.grad().to(kFloat64), 1e-2, 1e-2 * largest_magnitude(wc.grad()));
  }
}
