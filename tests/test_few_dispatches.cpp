// Few dispatches per training step (issue 40): clip_grad_norm_ as two list ops (foreach_norm,
// foreach_clip_by_norm) checked against an element-by-element reference; Adam/SGD on the CPU as
// one fused dispatch per group, bitwise equal to the per-tensor step; linear with a bias as one
// dispatch on the CPU, bitwise equal to matmul + add, its backward as two (gx; gw with gb)
// against gradcheck; the transformer's attention reading and writing the heads in place.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/fused.h"
#include "optim/sgd.h"
#include "nn/transformer.h"
#include "tensor/dispatch.h"
#include "tensor/threads.h"
#include "tensor/variants.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// sum |x|^p over every element (or max |x|), in long double, then the root.
double reference_norm(const std::vector<Tensor>& ts, double p) {
  long double acc = 0;
  for (const Tensor& t : ts)
    for (double v : t.to(kFloat64).contiguous().tolist<double>()) {
      const long double a = std::fabs(v);
      acc = std::isinf(p) ? std::max(acc, a) : acc + std::pow(a, (long double)p);
    }
  return std::isinf(p) ? double(acc) : double(std::pow(acc, 1.0L / p));
}

std::vector<Tensor> grads_list() {
  return {random_tensor({300, 257}, kFloat32, 1), random_tensor({70001}, kFloat32, 2),
          random_tensor({5}, kFloat64, 3), random_tensor({0, 4}, kFloat32, 4),
          random_tensor({33, 9}, kBFloat16, 5)};
}

}  // namespace

TEST_CASE("foreach_norm: the total p-norm of a list, any dtypes, equals the reference") {
  const std::vector<Tensor> ts = grads_list();
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
    CAPTURE(p);
    const Tensor total = optim::fused::foreach_norm(ts, p);
    CHECK(total.dim() == 0);
    CHECK(total.dtype() == kFloat64);
    CHECK(total.item<double>() == doctest::Approx(reference_norm(ts, p)).epsilon(1e-12));
  }
  // Strided members read like their contiguous copies.
  const Tensor m = random_tensor({40, 30}, kFloat32, 6);
  CHECK(optim::fused::foreach_norm({m.t()}, 2.0).item<double>() ==
        optim::fused::foreach_norm({m.t().contiguous()}, 2.0).item<double>());
  // NaN propagates for every norm, inf for the finite ones.
  Tensor bad = random_tensor({100000}, kFloat32, 7);
  bad.view({-1}).narrow(0, 99999, 1).fill_(NAN);
  for (double p : {2.0, double(INFINITY)})
    CHECK(std::isnan(optim::fused::foreach_norm({ts[0], bad}, p).item<double>()));
}

TEST_CASE("foreach_norm: the same bits on 1 and 2 threads (chunks summed in order)") {
  const std::vector<Tensor> ts = grads_list();
  const int threads = get_num_threads();
  set_num_threads(1);
  const double one = optim::fused::foreach_norm(ts, 2.0).item<double>();
  set_num_threads(2);
  const double two = optim::fused::foreach_norm(ts, 2.0).item<double>();
  set_num_threads(threads);
  CHECK(one == two);
}

TEST_CASE("foreach_clip_by_norm: scales by max_norm / (total + 1e-6) only when that is below 1") {
  std::vector<Tensor> ts = grads_list();
  std::vector<Tensor> before;
  for (const Tensor& t : ts) before.push_back(t.clone());
  const Tensor total = optim::fused::foreach_norm(ts, 2.0);
  const double value = total.item<double>();
  optim::fused::foreach_clip_by_norm_(ts, total, 2 * value);  // factor >= 1: untouched
  for (size_t i = 0; i < ts.size(); ++i) CHECK(equal(ts[i], before[i]));
  optim::fused::foreach_clip_by_norm_(ts, total, 0.25 * value);
  const double coef = 0.25 * value / (value + 1e-6);
  for (size_t i = 0; i < ts.size(); ++i) {
    CAPTURE(i);
    // opmath: f32 for f32/bf16, f64 for f64, as mul_ by the factor computes it
    Tensor want = ts[i].dtype() == kFloat64
                      ? before[i] * coef
                      : (before[i].to(kFloat32) * float(coef)).to(ts[i].dtype());
    CHECK(equal(ts[i], want));
  }
  CHECK(optim::fused::foreach_norm(ts, 2.0).item<double>() ==
        doctest::Approx(0.25 * value).epsilon(1e-5));
  // A NaN total turns the grads into NaN (PyTorch's clamp(NaN) * grad).
  std::vector<Tensor> one = {random_tensor({8}, kFloat32, 9)};
  optim::fused::foreach_clip_by_norm_(one, full({}, NAN, kFloat64, kCPU), 1.0);
  CHECK(std::isnan(one[0].sum().item<double>()));
  CHECK_THROWS_WITH_AS(optim::fused::foreach_norm({}, 2.0),
                       doctest::Contains("foreach_norm: an empty tensor list"), Error);
  CHECK_THROWS_WITH_AS(
      optim::fused::foreach_norm({random_tensor({3}, kFloat32, 1), ones({2}, kInt64, kCPU)}, 2.0),
      doctest::Contains("tensor 1 must be a floating tensor"), Error);
  CHECK_THROWS_WITH_AS(optim::fused::foreach_norm({random_tensor({3}, kFloat32, 1)}, -1.0),
                       doctest::Contains("norm_type must be positive or inf"), Error);
}

TEST_CASE(
    "clip_grad_norm_: two dispatches and no host read for any number of parameters, the same "
    "clipping") {
  std::vector<Tensor> ps;
  for (int i = 0; i < 40; ++i) {
    Tensor p = random_tensor({17, 3 + i}, kFloat32, uint64_t(100 + i)).requires_grad_();
    p.set_grad(random_tensor({17, 3 + i}, kFloat32, uint64_t(200 + i)));
    ps.push_back(p);
  }
  std::vector<Tensor> grads;
  for (const Tensor& p : ps) grads.push_back(p.grad().clone());
  Tensor norm;
  const int64_t reads0 = profiler::host_read_count();
  const int64_t n = dispatches_of([&] { norm = optim::clip_grad_norm_(ps, 1.0); });
  CHECK(n == 2);
  CHECK(profiler::host_read_count() == reads0);  // the norm stays a tensor: no wait for a device
  CHECK(norm.dim() == 0);
  const double total = norm.item<double>();
  CHECK(total == doctest::Approx(reference_norm(grads, 2.0)).epsilon(1e-12));
  const float coef = float(1.0 / (total + 1e-6));
  for (size_t i = 0; i < ps.size(); ++i) CHECK(equal(ps[i].grad(), grads[i] * coef));
}

TEST_CASE("Adam, AdamW and SGD on the CPU: one dispatch per group, bitwise the per-tensor step") {
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    std::vector<Tensor> a, b;
    for (int i = 0; i < 6; ++i) {
      a.push_back(random_tensor({9, 4 + i}, kFloat32, uint64_t(10 + i)).requires_grad_());
      b.push_back(a.back().detach().clone().requires_grad_());
    }
    auto make = [&](std::vector<Tensor>& ps, bool fused) -> std::unique_ptr<optim::Optimizer> {
      std::unique_ptr<optim::Optimizer> o;
      if (which == 0) o = std::make_unique<optim::Adam>(ps, 1e-2);
      if (which == 1) o = std::make_unique<optim::AdamW>(ps, 1e-2);
      if (which == 2) o = std::make_unique<optim::SGD>(ps, 0.1, 0.9);
      for (auto& g : o->param_groups()) g.options["fused"] = fused ? 1.0 : 0.0;
      return o;
    };
    auto fused = make(a, true), plain = make(b, false);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        Tensor g = random_tensor(a[i].shape(), kFloat32, uint64_t(1000 * step + i));
        a[i].set_grad(g.clone());
        b[i].set_grad(g.clone());
      }
      const int64_t n = dispatches_of([&] { fused->step(); });
      if (step > 0) CHECK(n == 1);  // the first step also creates the state
      plain->step();
      for (size_t i = 0; i < a.size(); ++i) CHECK(bitwise_equal(a[i].detach(), b[i].detach()));
    }
  }
}

TEST_CASE("linear with a bias on the CPU: one dispatch, bitwise matmul + add in f32 and f64") {
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    const Tensor x = random_tensor({3, 5, 24}, dt, 1), w = random_tensor({10, 24}, dt, 2),
                 b = random_tensor({10}, dt, 3);
    Tensor y;
    const int64_t n = dispatches_of([&] { y = native::linear(x, w, b); });
    CHECK(n == 1);
    CHECK(y.shape() == Shape{3, 5, 10});
    CHECK(equal(y, native::add(native::matmul(x, native::t(w)), b)));
  }
}

TEST_CASE("linear backward: two dispatches, gradients pass gradcheck in f64 for 3-D inputs") {
  const Tensor x = random_tensor({2, 3, 6}, kFloat64, 1).requires_grad_(),
               w = random_tensor({4, 6}, kFloat64, 2).requires_grad_(),
               b = random_tensor({4}, kFloat64, 3).requires_grad_();
  const autograd::GradcheckResult r = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
  const Tensor xf = random_tensor({4, 16, 32}, kFloat32, 4).requires_grad_(),
               wf = random_tensor({8, 32}, kFloat32, 5).requires_grad_(),
               bf = random_tensor({8}, kFloat32, 6).requires_grad_();
  Tensor out = linear(xf, wf, bf);
  const Tensor g = random_tensor(out.shape(), kFloat32, 7);
  const int64_t n = dispatches_of([&] { out.backward(g); });
  CHECK(n == 2);  // gx = g w; linear_weight_grad: gw = g^T x and gb
  // gw and gb: one GEMM over the folded rows and the column sums, as the composite ops give.
  const Tensor g2 = native::reshape(g, {-1, 8}), x2 = native::reshape(xf.detach(), {-1, 32});
  CHECK(bitwise_equal(wf.grad(), native::mm(native::t(g2), x2)));
  CHECK(bitwise_equal(bf.grad(), native::sum(g2, {0})));
  CHECK(bitwise_equal(xf.grad(), native::matmul(g, wf.detach())));
  CHECK_THROWS_WITH_AS(native::linear_weight_grad(g, random_tensor({4, 15, 32}, kFloat32, 8), true),
                       doctest::Contains("the same leading dims"), Error);
}

TEST_CASE("TransformerBlock attention: no copies around the heads, gradients as the general path") {
  // The fused-QKV path (no mask, no cache) against the same block run with an explicit causal
  // mask, which takes split_heads + the attention op.
  nn::CausalSelfAttention attn(32, 4, 0.0, true);
  const Tensor x = random_tensor({2, 7, 32}, kFloat64, 1);
  attn.to(kFloat64);
  Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
  Tensor ya = attn.forward(xa);
  const Tensor causal = tril(ones({7, 7}, kBool, kCPU));
  Tensor yb = attn.forward(xb, nn::AttentionOptions{.attn_mask = causal});
  CHECK(allclose(ya, yb, 1e-12, 1e-12));
  const Tensor g = random_tensor(ya.shape(), kFloat64, 2);
  ya.backward(g);
  std::vector<Tensor> ga;
  for (const Tensor& p : attn.parameters()) ga.push_back(p.grad().clone());
  attn.zero_grad();
  yb.backward(g);
  CHECK(allclose(xa.grad(), xb.grad(), 1e-12, 1e-12));
  const std::vector<Tensor> ps = attn.parameters();
  for (size_t i = 0; i < ps.size(); ++i) CHECK(allclose(ga[i], ps[i].grad(), 1e-12, 1e-12));
  // The kernels read q, k, v as strided views of [B,T,3C] and write [B,T,C] (and the backward
  // reads grad [B,T,C] and writes [B,T,3C] through views): no copies either way (5 and 7
  // dispatches with the one-copy split of 2026-12-05).
  Tensor xc = x.clone().requires_grad_();
  Tensor yc;
  const auto forward_ops = [&] { yc = attn.forward(xc); };
  const int64_t n_forward = dispatches_of(forward_ops);
  CHECK(n_forward == 3);  // linear_bias (qkv), sdpa, linear_bias
  attn.zero_grad();       // (accumulating into existing grads would add one add per parameter)
  const int64_t n_backward = dispatches_of([&] { yc.backward(g); });
  CHECK(n_backward == 5);  // c_proj: 2; sdpa backward: 1; c_attn: 2
}

TEST_CASE("MINIDL_UNFUSED: each fused path's predecessor, same results, more dispatches") {
  ScopedUnfused restore;
  CHECK_THROWS_WITH_AS(variants::set_unfused("linear_wgrad,nope"),
                       doctest::Contains("unknown feature `nope`"), Error);
  const Tensor x = random_tensor({2, 5, 32}, kFloat32, 1);
  auto run = [&](const std::string& unfused, int64_t* fwd_ops, int64_t* bwd_ops) {
    variants::set_unfused(unfused);
    Generator gen(7);
    nn::TransformerBlock block(32, 4, 0.0, true, &gen);
    Tensor xi = x.clone().requires_grad_();
    Tensor y;
    *fwd_ops = dispatches_of([&] { y = block.forward(xi); });
    *bwd_ops = dispatches_of([&] { y.backward(random_tensor(y.shape(), kFloat32, 2)); });
    std::vector<Tensor> grads{xi.grad()};
    for (const Tensor& p : block.parameters()) grads.push_back(p.grad());
    Tensor norm;
    *bwd_ops += dispatches_of([&] { norm = optim::clip_grad_norm_(block.parameters(), 1e-3); });
    grads.push_back(full({}, norm.item<double>(), kFloat32, kCPU));
    return grads;
  };
  int64_t f_fused = 0, b_fused = 0, f_old = 0, b_old = 0;
  const std::vector<Tensor> fused = run("", &f_fused, &b_fused);
  const std::vector<Tensor> old = run("all", &f_old, &b_old);
  REQUIRE(fused.size() == old.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK(allclose(fused[i], old[i], 1e-5, 1e-6));
  }
  // forward: split_heads' copy and the heads' merge, the residual add beside ln_2, and GELU
  // beside c_fc
  CHECK(f_old == f_fused + 4);
  CHECK(b_old > b_fused + 4 + 2 + 10);  // a sum per bias, two more copies, a norm per grad
}
