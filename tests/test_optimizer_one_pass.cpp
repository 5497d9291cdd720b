// The one-pass Adam/AdamW and SGD of update_rules (contiguous f32 CPU tensors) against the general
// op-by-op path (taken by non-contiguous views of the same values): bitwise the same parameters,
// moments and momentum buffers over several steps (L2 or decoupled weight decay, amsgrad, also
// with inf/NaN gradients; momentum, dampening, nesterov). The 16-bit copy the Adam pass writes
// equals Tensor::to's (also for inf, NaN, subnormal and tie values), and the pass's results do not
// depend on the copy.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>

#include "minidl.h"
#include "tensor/update_rules.h"
#include "test_util.h"

using namespace minidl;
using testutil::bitwise_equal;

namespace {

// The same values as a contiguous [n] tensor and as a strided view (every other element of a
// [2n] buffer), so update_rules::adam takes the one-pass path on the first and the ops on the
// second.
struct Pair {
  Tensor dense, strided;
};
Pair make_pair(const Tensor& values) {
  const int64_t n = values.numel();
  Tensor buffer = zeros({2 * n});
  Tensor strided = buffer.as_strided({n}, {2}, 0);
  strided.copy_(values);
  return {values.clone(), strided};
}

// n values of N(0, scale) with specials planted at fixed places: +-inf, NaN, subnormals, +-0,
// the largest finite f32 and values on bf16/f16 rounding ties.
Tensor with_specials(int64_t n, double scale) {
  Tensor t = randn({n}) * scale;
  float* x = t.data_ptr<float>();
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-39f,
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::max(),
                            1.00390625f,    // 1 + 2^-8: a bf16 tie
                            1.0029296875f,  // 1 + 3*2^-10: near an f16 boundary
                            65520.0f};      // rounds to f16 inf
  for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); ++k)
    x[(int64_t(k) * 997 + 13) % n] = specials[k];
  return t;
}

// Adam state for one run of the pass.
struct AdamRun {
  Tensor p, m, v, vmax, copy;
};

// Four steps of update_rules::adam on contiguous tensors holding specials, writing the copy
// (`copy_dtype`: bf16, f16, or f32 for none) in the pass.
// Equal values, NaN where the other is NaN (a NaN's sign or payload may differ by path).
bool equal_or_both_nan(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  if (x.shape() != y.shape()) return false;
  const float *p = x.data_ptr<float>(), *q = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!(p[i] == q[i] || (p[i] != p[i] && q[i] != q[i]))) return false;
  return true;
}

AdamRun run_adam(const update_rules::AdamHyper& h, bool amsgrad, DType copy_dtype, int64_t n,
                 uint64_t seed) {
  manual_seed(seed);
  AdamRun r{with_specials(n, 1.0), zeros({n}), zeros({n}), zeros({n}), Tensor()};
  if (copy_dtype != kFloat32) r.copy = empty({n}, copy_dtype);
  for (int t = 1; t <= 4; ++t)
    update_rules::adam(r.p, with_specials(n, 0.1), r.m, r.v, amsgrad ? r.vmax : Tensor(), t, h,
                       r.copy);
  return r;
}

}  // namespace

TEST_SUITE("optimizer_one_pass") {
  TEST_CASE("update_rules::adam: one pass equals the op-by-op path bitwise") {
    manual_seed(5);
    const int64_t n = 70001;  // several parallel chunks and a ragged tail
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      const bool decoupled = variant != 1, amsgrad = variant == 2;
      const update_rules::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.05, decoupled};
      Pair p = make_pair(randn({n})), m = make_pair(zeros({n})), v = make_pair(zeros({n}));
      Pair mx = make_pair(zeros({n}));
      const Tensor p0 = p.dense.clone();
      for (int t = 1; t <= 4; ++t) {
        Pair g = make_pair(randn({n}) * 0.1);
        update_rules::adam(p.dense, g.dense, m.dense, v.dense, amsgrad ? mx.dense : Tensor(), t, h);
        update_rules::adam(p.strided, g.strided, m.strided, v.strided,
                           amsgrad ? mx.strided : Tensor(), t, h);
      }
      CHECK(equal(p.dense, p.strided.contiguous()));
      CHECK(equal(m.dense, m.strided.contiguous()));
      CHECK(equal(v.dense, v.strided.contiguous()));
      if (amsgrad) CHECK(equal(mx.dense, mx.strided.contiguous()));
      CHECK_FALSE(equal(p.dense, p0));  // the steps did move the parameters
    }
  }

  // Gradients holding inf and NaN: amsgrad's running maximum keeps a NaN (maximum's rule) in the
  // one pass as in the op-by-op path (it kept the old value before).
  TEST_CASE("update_rules::adam: amsgrad with inf/NaN gradients, one pass equals the ops") {
    const int64_t n = 70001;
    const update_rules::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.05, true};
    manual_seed(6);
    Pair p = make_pair(randn({n})), m = make_pair(zeros({n})), v = make_pair(zeros({n}));
    Pair mx = make_pair(zeros({n}));
    for (int t = 1; t <= 3; ++t) {
      Pair g = make_pair(with_specials(n, 0.1));
      update_rules::adam(p.dense, g.dense, m.dense, v.dense, mx.dense, t, h);
      update_rules::adam(p.strided, g.strided, m.strided, v.strided, mx.strided, t, h);
    }
    const float* vm = mx.dense.data_ptr<float>();
    CHECK(std::count_if(vm, vm + n, [](float x) { return x != x; }) > 0);
    CHECK(equal_or_both_nan(mx.dense, mx.strided));
    CHECK(equal_or_both_nan(p.dense, p.strided));
    CHECK(equal_or_both_nan(m.dense, m.strided));
    CHECK(equal_or_both_nan(v.dense, v.strided));
  }

  TEST_CASE("update_rules::adam: the copy written in the pass is to()'s, the update unchanged") {
    const int64_t n = 70001;
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      const bool decoupled = variant != 1, amsgrad = variant == 2;
      const update_rules::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.05, decoupled};
      const AdamRun plain = run_adam(h, amsgrad, kFloat32, n, 11);
      for (DType copy_dtype : {kBFloat16, kFloat16}) {
        CAPTURE(copy_dtype);
        const AdamRun r = run_adam(h, amsgrad, copy_dtype, n, 11);
        CHECK(bitwise_equal(r.copy, r.p.to(copy_dtype)));
        CHECK(bitwise_equal(r.p, plain.p));
        CHECK(bitwise_equal(r.m, plain.m));
        CHECK(bitwise_equal(r.v, plain.v));
        if (amsgrad) CHECK(bitwise_equal(r.vmax, plain.vmax));
      }
    }
  }

  TEST_CASE("update_rules::adam: a copy of another layout or dtype takes the op-by-op path") {
    manual_seed(12);
    const int64_t n = 1000;
    const update_rules::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.0, true};
    Tensor p = randn({n}), m = zeros({n}), v = zeros({n});
    Tensor strided_copy = zeros({2 * n}, kBFloat16).as_strided({n}, {2}, 0);
    Tensor f64_copy = zeros({n}, kFloat64);
    update_rules::adam(p, randn({n}), m, v, Tensor(), 1, h, strided_copy);
    CHECK(bitwise_equal(strided_copy.contiguous(), p.to(kBFloat16)));
    update_rules::adam(p, randn({n}), m, v, Tensor(), 2, h, f64_copy);
    CHECK(bitwise_equal(f64_copy, p.to(kFloat64)));
  }

  TEST_CASE("update_rules::sgd: one pass equals the op-by-op path bitwise") {
    manual_seed(6);
    const int64_t n = 70001;
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(variant);
      // plain; momentum + wd; momentum + dampening; nesterov
      const update_rules::SgdHyper h{0.05, variant == 0 ? 0.0 : 0.9, variant == 2 ? 0.3 : 0.0,
                                     variant == 1 ? 0.01 : 0.0, variant == 3};
      Pair p = make_pair(randn({n})), buf = make_pair(zeros({n}));
      const Tensor p0 = p.dense.clone();
      for (int t = 1; t <= 4; ++t) {
        Pair g = make_pair(randn({n}) * 0.1);
        const bool momentum = h.momentum != 0;
        update_rules::sgd(p.dense, g.dense, momentum ? buf.dense : Tensor(), t == 1, h);
        update_rules::sgd(p.strided, g.strided, momentum ? buf.strided : Tensor(), t == 1, h);
      }
      CHECK(equal(p.dense, p.strided.contiguous()));
      CHECK(equal(buf.dense, buf.strided.contiguous()));
      CHECK_FALSE(equal(p.dense, p0));
    }
  }
}
