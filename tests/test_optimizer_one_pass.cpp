// The one-pass Adam/AdamW and SGD of update_rules (contiguous f32 CPU tensors) against the general
// op-by-op path (taken by non-contiguous views of the same values): bitwise the same parameters,
// moments and momentum buffers over several steps (L2 or decoupled weight decay, amsgrad;
// momentum, dampening, nesterov).
#include <doctest/doctest.h>

#include "minidl.h"
#include "tensor/update_rules.h"

using namespace minidl;

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
