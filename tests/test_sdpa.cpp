// The fused scaled_dot_product_attention op (CPU): golden values from torch's formula, f64
// gradcheck, fused vs composite (f32, bf16), masks, fully masked rows, dropout regenerated in
// backward, broadcasting, autocast, MultiheadAttention's fused path, memory without L x S.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "golden.h"
#include "nn/attention.h"
#include "autograd/autocast.h"
#include "tensor/storage.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = kFloat64) {
  return random_tensor(s, dt, seed, -1.5, 1.5);
}

struct Grads {
  Tensor out, gq, gk, gv;
};

// out and the gradients of sum(out * gout) for one attention function.
template <typename Fn>
Grads run(Fn fn, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& gout) {
  Tensor q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true);
  Tensor v = v0.detach().requires_grad_(true);
  Tensor out = fn(q, k, v);
  sum(out * gout).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_grads(const Grads& a, const Grads& b, double rtol, double atol) {
  check_close(a.out, b.out, rtol, atol);
  check_close(a.gq, b.gq, rtol, atol);
  check_close(a.gk, b.gk, rtol, atol);
  check_close(a.gv, b.gv, rtol, atol);
}

struct Cfg {
  Shape q, k, v;
  bool causal = false;
  int mask = 0;  // 0 none, 1 bool [L,S], 2 float [..., 1, L, S] broadcast
};

Tensor make_mask(const Cfg& c, uint64_t seed) {
  const int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
  if (c.mask == 1) {
    Tensor m = lt(random_tensor({L, S}, kFloat32, seed, 0, 1), Scalar(0.7));
    return logical_or(m, eq(arange(S).unsqueeze(0), Scalar(0)));  // key 0 always attended
  }
  if (c.mask == 2) return rnd({1, L, S}, seed, kFloat32);
  return {};
}

}  // namespace

TEST_CASE("sdpa matches torch's formula (golden f64 and f32: out and gradients)") {
  const json& g = golden("golden_sdpa.json");
  for (const json& c : g["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    for (DType dt : {kFloat64, kFloat32}) {
      CAPTURE(dt);
      Tensor q = golden_tensor(c["q"], dt), k = golden_tensor(c["k"], dt);
      Tensor v = golden_tensor(c["v"], dt), gout = golden_tensor(c["gout"], dt);
      Tensor mask;
      if (c.contains("mask"))
        mask = golden_tensor(c["mask"], c["mask"]["shape"].size() == 2 ? kBool : dt);
      std::optional<double> scale;
      if (c.contains("scale")) scale = c["scale"].get<double>();
      const bool causal = c["is_causal"].get<bool>();
      Grads r = run(
          [&](const Tensor& a, const Tensor& b, const Tensor& d) {
            return scaled_dot_product_attention(a, b, d, mask, 0.0, causal, scale);
          },
          q, k, v, gout);
      const double tol = dt == kFloat64 ? 1e-10 : 2e-5;
      check_close(r.out, golden_values(c["out"]), tol, tol);
      check_close(r.gq, golden_values(c["grad_q"]), tol, tol);
      check_close(r.gk, golden_values(c["grad_k"]), tol, tol);
      check_close(r.gv, golden_values(c["grad_v"]), tol, tol);
    }
  }
}

TEST_CASE("sdpa gradcheck (f64): causal, masks, L != S, sizes across blocks, batch and heads") {
  const std::vector<Cfg> cfgs = {
      {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
      {{2, 2, 5, 3}, {2, 2, 5, 3}, {2, 2, 5, 2}, true},
      {{1, 2, 4, 3}, {1, 2, 6, 3}, {1, 2, 6, 3}, true},  // L < S, top-left causal
      {{2, 6, 3}, {2, 4, 3}, {2, 4, 3}, true},           // L > S
      {{2, 5, 3}, {2, 6, 3}, {2, 6, 2}, false, 1},
      {{2, 2, 5, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, true, 2},
      {{1, 70, 3}, {1, 67, 3}, {1, 67, 2}, true},  // odd sizes over the 64-wide blocks
      {{1, 70, 2}, {1, 67, 2}, {1, 67, 2}, false, 1},
  };
  for (size_t n = 0; n < cfgs.size(); ++n) {
    const Cfg& c = cfgs[n];
    CAPTURE(n);
    const Tensor mask = make_mask(c, 90 + n);
    const Tensor m = mask.defined() && mask.is_floating_point() ? mask.to(kFloat64) : mask;
    std::vector<Tensor> in = {rnd(c.q, 10 + n).requires_grad_(true),
                              rnd(c.k, 20 + n).requires_grad_(true),
                              rnd(c.v, 30 + n).requires_grad_(true)};
    auto r = autograd::gradcheck(
        [&](const std::vector<Tensor>& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], m, 0.0, c.causal);
        },
        in);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("sdpa fused vs composite: f32 within 1e-5, bf16 within 2^-8") {
  const std::vector<Cfg> cfgs = {
      {{2, 3, 100, 16}, {2, 3, 100, 16}, {2, 3, 100, 16}, true},
      {{2, 3, 70, 32}, {2, 3, 130, 32}, {2, 3, 130, 24}},
      {{2, 2, 65, 8}, {2, 2, 65, 8}, {2, 2, 65, 8}, true, 1},
      {{2, 2, 65, 8}, {2, 2, 129, 8}, {2, 2, 129, 8}, false, 2},
      {{4, 1, 8}, {4, 1, 8}, {4, 1, 8}, true},
  };
  for (size_t n = 0; n < cfgs.size(); ++n) {
    const Cfg& c = cfgs[n];
    CAPTURE(n);
    const Tensor mask = make_mask(c, 40 + n);
    auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return scaled_dot_product_attention(a, b, d, mask, 0.0, c.causal);
    };
    auto math = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return scaled_dot_product_attention_math(a, b, d, mask, 0.0, c.causal);
    };
    // the nn composite with its true = masked convention computes the same
    auto nn_comp = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      const Tensor m = mask.defined() && mask.dtype() == kBool ? logical_not(mask) : mask;
      return F::attention_with_weights(a, b, d, m, c.causal).output;
    };
    Tensor q = rnd(c.q, 1 + n, kFloat32), k = rnd(c.k, 2 + n, kFloat32);
    Tensor v = rnd(c.v, 3 + n, kFloat32);
    Shape os = c.q;
    os.back() = c.v.back();
    Tensor gout = rnd(os, 4 + n, kFloat32);
    Grads a = run(fused, q, k, v, gout);
    check_grads(a, run(math, q, k, v, gout), 1e-5, 1e-5);
    check_grads(a, run(nn_comp, q, k, v, gout), 1e-5, 1e-5);
    // bf16 in, f32 inside, bf16 out: against the f32 composite of the same (rounded) inputs
    Tensor qb = q.to(kBFloat16), kb = k.to(kBFloat16), vb = v.to(kBFloat16);
    Tensor gb = gout.to(kBFloat16);
    Grads h = run(fused, qb, kb, vb, gb);
    Grads ref = run(math, qb.to(kFloat32), kb.to(kFloat32), vb.to(kFloat32), gb.to(kFloat32));
    const double u = std::ldexp(1.0, -8);
    auto near = [&](const Tensor& x, const Tensor& y) {
      CHECK(x.dtype() == kBFloat16);
      const double mx = amax(abs(y), {}).item<double>();
      check_close(x.to(kFloat32), y, u, 2 * u * mx);
    };
    near(h.out, ref.out);
    near(h.gq, ref.gq);
    near(h.gk, ref.gk);
    near(h.gv, ref.gv);
  }
}

TEST_CASE("sdpa: a fully masked query row gives 0 and zero gradients (torch's math: NaN)") {
  Tensor q = rnd({2, 4, 3}, 1), k = rnd({2, 5, 3}, 2), v = rnd({2, 5, 2}, 3);
  Tensor mask = ones({4, 5}, kBool);
  mask.narrow(0, 2, 1).fill_(false);  // query 2 attends nothing
  Tensor gout = rnd({2, 4, 2}, 4);
  auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
    return scaled_dot_product_attention(a, b, d, mask);
  };
  Grads r = run(fused, q, k, v, gout);
  check_close(r.out.narrow(1, 2, 1), std::vector<double>(4, 0.0));
  check_close(r.gq.narrow(1, 2, 1), std::vector<double>(6, 0.0));
  CHECK(std::isnan(
      sum(scaled_dot_product_attention_math(q, k, v, mask).narrow(1, 2, 1)).item<double>()));
  // the other rows, and k/v gradients (row 2 contributes nothing), match the composite
  Tensor keep = ones({4, 1}, kBool);
  keep.narrow(0, 2, 1).fill_(false);
  Tensor g2 = where(keep, gout, Scalar(0.0));
  Grads m = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        Tensor m2 = logical_or(mask, logical_not(keep));  // row 2 attends all, grads zeroed
        return scaled_dot_product_attention_math(a, b, d, m2);
      },
      q, k, v, g2);
  check_close(where(keep, r.out, Scalar(0.0)), where(keep, m.out, Scalar(0.0)), 1e-12, 1e-12);
  check_close(r.gk, m.gk, 1e-12, 1e-12);
  check_close(r.gv, m.gv, 1e-12, 1e-12);
  // a float mask of -inf everywhere in a row, and S = 0, behave the same
  Tensor fm = where(mask, zeros({}, kFloat64), Scalar(-std::numeric_limits<double>::infinity()));
  check_close(scaled_dot_product_attention(q, k, v, fm), r.out, 1e-12, 1e-12);
  Tensor e =
      scaled_dot_product_attention(q, zeros({2, 0, 3}, kFloat64), zeros({2, 0, 2}, kFloat64));
  check_close(e, std::vector<double>(16, 0.0));
}

TEST_CASE("sdpa dropout: the fused mask is dropout_mask's stream, regenerated in backward") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor q = rnd({2, 3, 70, 4}, 1), k = rnd({2, 3, 66, 4}, 2), v = rnd({2, 3, 66, 5}, 3);
    Tensor gout = rnd({2, 3, 70, 5}, 4);
    Generator g1(77), g2(77);
    Grads a = run(
        [&](const Tensor& x, const Tensor& y, const Tensor& z) {
          return scaled_dot_product_attention(x, y, z, {}, 0.3, causal, {}, &g1);
        },
        q, k, v, gout);
    Grads b = run(
        [&](const Tensor& x, const Tensor& y, const Tensor& z) {
          return scaled_dot_product_attention_math(x, y, z, {}, 0.3, causal, {}, &g2);
        },
        q, k, v, gout);
    check_grads(a, b, 1e-10, 1e-10);
    CHECK(g1.offset() == g2.offset());
    // dropout really dropped something
    CHECK(amax(abs(a.out - scaled_dot_product_attention(q, k, v, {}, 0.0, causal)), {})
              .item<double>() > 1e-3);
  }
}

TEST_CASE("sdpa: broadcast batch dims, explicit scale, autocast, errors") {
  Tensor q = rnd({2, 3, 5, 4}, 1), k = rnd({1, 3, 6, 4}, 2), v = rnd({3, 6, 2}, 3);
  Tensor gout = rnd({2, 3, 5, 2}, 4);
  Tensor fm = rnd({5, 6}, 5);
  auto f = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
    return scaled_dot_product_attention(a, b, d, fm, 0.0, false, 0.7);
  };
  auto m = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
    return scaled_dot_product_attention_math(a, b, d, fm, 0.0, false, 0.7);
  };
  Grads a = run(f, q, k, v, gout), b = run(m, q, k, v, gout);
  CHECK(a.gk.shape() == k.shape());
  CHECK(a.gv.shape() == v.shape());
  check_grads(a, b, 1e-10, 1e-10);
  {
    amp::autocast ac(DeviceType::cpu);
    Tensor o = scaled_dot_product_attention(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32));
    CHECK(o.dtype() == kBFloat16);
  }
  auto throws = [&](auto fn, const char* what) {
    CHECK_THROWS_WITH_AS(fn(), doctest::Contains(what), Error);
  };
  throws([&] { return scaled_dot_product_attention(q, rnd({2, 3, 6, 5}, 1), v); }, "last dim");
  throws([&] { return scaled_dot_product_attention(q, k, rnd({3, 7, 2}, 1)); }, "keys");
  throws([&] { return scaled_dot_product_attention(q, k, v, ones({5, 6}, kInt64)); }, "bool");
  throws([&] { return scaled_dot_product_attention(q, k, v, ones({4, 6}, kBool)); }, "broadcast");
  throws([&] { return scaled_dot_product_attention(q, k, v, {}, 1.5); }, "dropout_p");
  throws([&] { return scaled_dot_product_attention(q, k.to(kFloat32), v); }, "dtype");
}

TEST_CASE("MultiheadAttention without weights (fused) matches the composite with weights") {
  manual_seed(3);
  nn::MultiheadAttention mha(16, 4);
  Tensor x = rnd({2, 7, 16}, 1, kFloat32);
  Tensor kpm = zeros({2, 7}, kBool);
  kpm.narrow(1, 5, 2).fill_(true);
  Tensor am = lt(random_tensor({7, 7}, kFloat32, 9, 0, 1), Scalar(0.3));
  am.narrow(1, 0, 1).fill_(false);
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    const bool causal = variant == 0;
    const Tensor mask = variant == 1 ? am : Tensor();
    const Tensor pad = variant == 2 ? kpm : Tensor();
    Tensor with = mha.forward(x, x, x, pad, true, mask, true, causal).output;
    Tensor without = mha.forward(x, x, x, pad, false, mask, true, causal).output;
    check_close(without, with, 1e-5, 1e-5);
  }
}

TEST_CASE("sdpa causal L=S=2048 (fused) allocates no L x S buffer, forward and backward") {
  const int64_t L = 2048, E = 32, LS = L * L * 4;  // an f32 [L,S] buffer: 16 MiB
  Tensor q = rnd({1, 1, L, E}, 1, kFloat32).requires_grad_(true);
  Tensor k = rnd({1, 1, L, E}, 2, kFloat32).requires_grad_(true);
  Tensor v = rnd({1, 1, L, E}, 3, kFloat32).requires_grad_(true);
  Tensor gout = rnd({1, 1, L, E}, 4, kFloat32);
  reset_peak_memory_stats(kCPU);
  const int64_t base = memory_stats(kCPU).allocated;
  {
    Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    sum(out * gout).backward();
  }
  const int64_t peak = memory_stats(kCPU).peak - base;
  INFO("fused peak ", peak, " bytes");
  CHECK(peak < LS / 4);
  CHECK(q.grad().defined());
  // the measurement sees an L x S buffer when there is one: the composite forward
  NoGradGuard no_grad;
  reset_peak_memory_stats(kCPU);
  const int64_t base2 = memory_stats(kCPU).allocated;
  { Tensor out = scaled_dot_product_attention_math(q, k, v, {}, 0.0, true); }
  CHECK(memory_stats(kCPU).peak - base2 >= LS);
}
