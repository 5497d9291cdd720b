// The fused classifier loss (nn::functional::fused_cross_entropy_, llm.c's fused_classifier):
// loss and in-place gradient against the composite cross_entropy(logits[:, :V].to(f32)) in
// f64/f32/bf16 with padded columns and ignored rows, the autograd contract (upstream scale, no
// grad, refusals, version errors), GPT::forward(idx, targets) against the lm_loss path, the
// dispatch counts of both paths (the CUDA kernel: test_cuda_fused_cross_entropy.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "apps/gpt/model.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
namespace F = nn::functional;

namespace {

// int64 targets [N] in [0, V), with every `every`-th row ignore_index (-100) when every > 0.
Tensor make_targets(int64_t N, int64_t V, uint64_t seed, int64_t every, Device dev = kCPU) {
  Tensor t = random_tensor({N}, kInt64, seed, 0, double(V));
  for (int64_t i = 0; every > 0 && i < N; i += every) t.data_ptr<int64_t>()[i] = -100;
  return t.to(dev);
}

// The composite path (trainer's lm_loss): loss and the gradient of the [N,Vp] logits through
// the slice [:, :V] and the f32 (f64 for f64) copy.
std::pair<Tensor, Tensor> composite(const Tensor& logits, const Tensor& target, int64_t V) {
  Tensor x = logits.detach().clone().requires_grad_();
  const DType acc = logits.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss = F::cross_entropy(x.slice(1, 0, V).to(acc), target);
  loss.backward();
  return {loss.detach(), x.grad()};
}

// max |t| (f64), at least tiny.
// Tolerances of the fused op against the composite one (relative to the largest value).
double rel_tol_of(DType dt) {
  return dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 2e-6 : 1e-2;
}

// Fused vs composite for logits:[N,Vp] of dt, ignoring every `every`-th row; on `dev`.
void check_against_composite(DType dt, int64_t N, int64_t V, int64_t Vp, int64_t every,
                             uint64_t seed) {
  CAPTURE(dtype_name(dt));
  CAPTURE(N);
  CAPTURE(V);
  CAPTURE(Vp);
  CAPTURE(every);
  const Tensor logits = random_tensor({N, Vp}, dt, seed, -4, 4);
  const Tensor target = make_targets(N, V, seed + 1, every);
  auto [want_loss, want_grad] = composite(logits, target, V);
  Tensor buf = logits.clone();
  const Tensor loss = native::fused_cross_entropy_(buf, target, V);
  CHECK(loss.dim() == 0);
  CHECK(loss.dtype() == (dt == kFloat64 ? kFloat64 : kFloat32));
  const double tol = rel_tol_of(dt);
  CHECK(loss.item<double>() == doctest::Approx(want_loss.item<double>()).epsilon(tol));
  check_close(buf, want_grad.to(kFloat64), tol, tol * largest_magnitude(want_grad));
  // padded columns and ignored rows are exactly 0
  for (double v : to_f64(buf.slice(1, V, Vp))) CHECK(v == 0.0);
  for (int64_t i = 0; every > 0 && i < N; i += every)
    for (double v : to_f64(buf.select(0, i))) CHECK(v == 0.0);
  // the no-grad form gives the same loss, bit for bit, and leaves the logits alone
  const Tensor copy = logits.clone();
  CHECK(native::fused_cross_entropy(copy, target, V).item<double>() == loss.item<double>());
  CHECK(equal(copy, logits));
}

// A tiny GPT with padded vocabulary, in dt.
std::shared_ptr<gpt::GPT> tiny_gpt(DType dt, uint64_t seed) {
  gpt::GPTConfig c;
  c.vocab_size = 13, c.padded_vocab_size = 16, c.block_size = 8;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  Generator gen(seed);
  auto m = std::make_shared<gpt::GPT>(c);
  m->init_weights(&gen);
  m->to(dt);
  return m;
}

// Parameter gradients of a loss (cleared before).
std::vector<Tensor> param_grads(gpt::GPT& m, const std::function<Tensor()>& loss_fn,
                                Tensor* loss_out) {
  m.zero_grad();
  Tensor loss = loss_fn();
  loss.backward();
  *loss_out = loss.detach();
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST_CASE("fused_cross_entropy_: loss and in-place gradient equal the composite path") {
  uint64_t seed = 10;
  for (DType dt : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    check_against_composite(dt, 9, 13, 16, 4, seed++);  // padded, rows 0, 4, 8 ignored
    check_against_composite(dt, 5, 7, 7, 0, seed++);    // no padding, nothing ignored
    check_against_composite(dt, 6, 1000, 1027, 3, seed++);
  }
  // rows of thousands of columns, ragged padding (threads split the rows)
  check_against_composite(kFloat32, 67, 5003, 5024, 5, seed++);
  check_against_composite(kBFloat16, 33, 5003, 5024, 0, seed++);
}

TEST_CASE("fused_cross_entropy_: [B,T,Vp] logits with [B,T] targets, like the GPT head") {
  const Tensor logits = random_tensor({2, 3, 10}, kFloat32, 3, -3, 3);
  const Tensor target = make_targets(6, 8, 4, 5).reshape({2, 3});
  auto [want_loss, want_grad] = composite(logits.reshape({6, 10}), target.reshape({6}), 8);
  Tensor buf = logits.clone();
  const Tensor loss = native::fused_cross_entropy_(buf, target, 8);
  CHECK(loss.item<double>() == doctest::Approx(want_loss.item<double>()).epsilon(1e-6));
  check_close(buf.reshape({6, 10}), want_grad, 1e-5, 1e-7);
}

TEST_CASE("fused_cross_entropy_: every target ignored gives NaN like cross_entropy's mean") {
  const Tensor logits = random_tensor({4, 6}, kFloat32, 5);
  const Tensor target = full({4}, -100, kInt64);
  auto [want_loss, want_grad] = composite(logits, target, 5);
  CHECK(std::isnan(want_loss.item<double>()));  // the existing op: 0/0
  Tensor buf = logits.clone();
  CHECK(std::isnan(native::fused_cross_entropy_(buf, target, 5).item<double>()));
  CHECK(equal(buf, zeros({4, 6})));
  CHECK(equal(want_grad, zeros({4, 6})));
  CHECK(std::isnan(native::fused_cross_entropy(logits, full({4}, 2, kInt64), 5, 2).item<double>()));
  // an empty batch too
  Tensor none = empty({0, 6}, kFloat32);
  CHECK(std::isnan(native::fused_cross_entropy_(none, empty({0}, kInt64), 5).item<double>()));
}

TEST_CASE("fused_cross_entropy_: autograd gives the composite gradient, times the upstream one") {
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    const Tensor x0 = random_tensor({7, 12}, dt, 21, -3, 3);
    const Tensor target = make_targets(7, 10, 22, 3);
    for (double scale : {1.0, 3.0, -0.25}) {
      CAPTURE(scale);
      // logits are a non-leaf: mul by a leaf w (so the gradient flows on through MulBackward)
      Tensor w = ones({7, 12}, dt).requires_grad_();
      Tensor logits = mul(x0, w);
      Tensor loss = F::fused_cross_entropy_(logits, target, 10);
      CHECK(loss.requires_grad());
      CHECK(loss.grad_fn()->name() == "FusedCrossEntropyBackward");
      mul(loss, scale).backward();
      Tensor wr = ones({7, 12}, dt).requires_grad_();
      Tensor ref = mul(F::cross_entropy(mul(x0, wr).slice(1, 0, 10), target), scale);
      ref.backward();
      CHECK(loss.item<double>() * scale == doctest::Approx(ref.item<double>()).epsilon(1e-6));
      const double tol = dt == kFloat64 ? 1e-12 : 2e-6;
      check_close(w.grad(), wr.grad(), tol, tol * largest_magnitude(wr.grad()));
    }
  }
}

TEST_CASE("fused_cross_entropy_: f64 gradcheck of the fused node against finite differences") {
  const Tensor target = make_targets(4, 5, 31, 3);
  auto f = [&](const std::vector<Tensor>& in) {
    // a fresh non-leaf each call (the op consumes its logits)
    return mul(F::fused_cross_entropy_(mul(in[0], 1.0), target, 5), 2.0);
  };
  const auto r = autograd::gradcheck(f, {leaf({4, 7}, 32, -2, 2)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("fused_cross_entropy_: without grad the logits are left untouched") {
  const Tensor x0 = random_tensor({5, 9}, kFloat32, 41);
  const Tensor target = make_targets(5, 8, 42, 0);
  Tensor w = ones({5, 9}).requires_grad_();
  {
    NoGradGuard ng;
    Tensor logits = mul(x0, w);
    Tensor before = logits.clone();
    Tensor loss = F::fused_cross_entropy_(logits, target, 8);
    CHECK_FALSE(loss.requires_grad());
    CHECK(equal(logits, before));
  }
  Tensor plain = x0.clone();  // does not require grad
  F::fused_cross_entropy_(plain, target, 8);
  CHECK(equal(plain, x0));
}

TEST_CASE("fused_cross_entropy_: refusals name the problem and write nothing") {
  const Tensor target = make_targets(4, 6, 51, 0);
  Tensor leafx = random_tensor({4, 8}, kFloat32, 52).requires_grad_();
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(leafx, target, 6),
                       doctest::Contains("are a leaf that requires grad"), Error);
  // a view of a leaf would overwrite the leaf too
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(leafx.view({2, 2, 8}), target.view({2, 2}), 6),
                       doctest::Contains("(or a view of one)"), Error);
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(leafx.unsqueeze(0).squeeze(0), target, 6),
                       doctest::Contains("(or a view of one)"), Error);
  Tensor w = ones({4, 8}).requires_grad_();
  Tensor logits = mul(random_tensor({4, 8}, kFloat32, 53), w);
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(logits.slice(1, 0, 6), target, 6),
                       doctest::Contains("expected contiguous logits"), Error);
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(logits, target, 9),
                       doctest::Contains("num_classes 9 must be in [1, 8]"), Error);
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(logits, target.to(kInt32), 6),
                       doctest::Contains("expected int64 target"), Error);
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(logits, make_targets(3, 6, 1, 0), 6),
                       doctest::Contains("does not match logits shape [4, 8]"), Error);
  // a target in the padding (6 <= t < 8) is out of range: nothing is written
  Tensor bad = target.clone();
  bad.data_ptr<int64_t>()[2] = 7;
  const Tensor before = logits.detach().clone();
  CHECK_THROWS_WITH_AS(F::fused_cross_entropy_(logits, bad, 6),
                       doctest::Contains("target 7 at index 2 is out of bounds"), Error);
  CHECK(equal(logits.detach(), before));
}

TEST_CASE("fused_cross_entropy_: a saved copy of the logits and a second backward are refused") {
  const Tensor target = make_targets(3, 5, 61, 0);
  Tensor w = ones({3, 5}).requires_grad_();
  Tensor logits = mul(random_tensor({3, 5}, kFloat32, 62), w);
  Tensor sq = mul(logits, logits);  // MulBackward saves the logits
  Tensor loss = add(F::fused_cross_entropy_(logits, target, 5), sum(sq));
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"),
                       Error);
  Tensor logits2 = mul(random_tensor({3, 5}, kFloat32, 63), w);
  Tensor loss2 = F::fused_cross_entropy_(logits2, target, 5);
  loss2.backward(Tensor(), /*retain_graph=*/true);
  CHECK_THROWS_WITH_AS(loss2.backward(), doctest::Contains("FusedCrossEntropyBackward"), Error);
}

TEST_CASE("gpt forward(idx, targets): the lm_loss value and parameter gradients") {
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    auto m = tiny_gpt(dt, 7);
    const Tensor idx = random_tensor({2, 8}, kInt64, 71, 0, 13);
    Tensor y = random_tensor({2, 8}, kInt64, 72, 0, 13);
    y.data_ptr<int64_t>()[5] = -100;
    const DType acc = dt == kFloat64 ? kFloat64 : kFloat32;  // lm_loss: f32 for f32/bf16
    Tensor loss_f, loss_c;
    auto gf = param_grads(
        *m, [&] { return (*m)(idx, y); }, &loss_f);  // forward_inputs
    auto gc = param_grads(
        *m,
        [&] {
          const Tensor logits = m->forward(idx);  // [B,T,V] view of the padded head
          return F::cross_entropy(logits.to(acc).reshape({-1, 13}), y.reshape({-1}));
        },
        &loss_c);
    const double tol = dt == kFloat64 ? 1e-10 : 1e-5;
    CHECK(loss_f.item<double>() == doctest::Approx(loss_c.item<double>()).epsilon(tol));
    REQUIRE(gf.size() == gc.size());
    for (size_t i = 0; i < gf.size(); ++i) {
      CAPTURE(i);
      check_close(gf[i], gc[i].to(kFloat64), tol, tol * largest_magnitude(gc[i]));
    }
    // eval / no grad: the same loss, no history
    NoGradGuard ng;
    Tensor le = m->forward(idx, y);
    CHECK_FALSE(le.requires_grad());
    CHECK(le.item<double>() == doctest::Approx(loss_f.item<double>()).epsilon(1e-12));
  }
}

TEST_CASE("gpt forward(idx, targets) under bf16 autocast: no f32 logits, the unfused loss") {
  auto m = tiny_gpt(kFloat32, 8);
  const Tensor idx = random_tensor({2, 8}, kInt64, 81, 0, 13);
  const Tensor y = random_tensor({2, 8}, kInt64, 82, 0, 13);
  double fused = 0, unfused = 0;
  {
    amp::autocast ac(DeviceType::cpu);
    fused = m->forward(idx, y).item<double>();
    unfused = F::cross_entropy(m->forward(idx).to(kFloat32).reshape({-1, 13}), y.reshape({-1}))
                  .item<double>();
  }
  CHECK(fused == doctest::Approx(unfused).epsilon(1e-3));
}

TEST_CASE("gpt acc.forward(idx, targets): bf16 amp with grad accumulation trains like lm_loss") {
  // The trainer's loop: the 1/grad_accum_steps upstream gradient reaches the in-place buffer.
  std::vector<Tensor> params[2];
  for (int fused = 0; fused < 2; ++fused) {
    auto m = tiny_gpt(kFloat32, 11);
    Accelerator acc(
        {.mode = "single", .amp = "bf16", .grad_accum_steps = 2, .seed = 5, .verbose = false});
    optim::SGD opt(m->parameters(), 0.1);
    acc.prepare(m, opt);
    for (uint64_t it = 0; it < 4; ++it) {
      const Tensor idx = random_tensor({2, 8}, kInt64, 100 + it, 0, 13);
      const Tensor y = random_tensor({2, 8}, kInt64, 200 + it, 0, 13);
      acc.zero_grad();
      Tensor loss;
      {
        auto ac = acc.autocast();
        loss = fused ? acc.forward(idx, y)
                     : F::cross_entropy(acc.forward(idx).to(kFloat32).reshape({-1, 13}),
                                        y.reshape({-1}));
      }
      acc.backward(loss);
      acc.step();
    }
    for (const Tensor& p : m->parameters()) params[fused].push_back(p.detach().clone());
  }
  for (size_t i = 0; i < params[0].size(); ++i) {
    CAPTURE(i);
    check_close(params[1][i], params[0][i].to(kFloat64), 1e-4, 1e-4);
  }
}

TEST_CASE("fused_cross_entropy_: dispatches of loss forward + backward vs the lm_loss path") {
  // GPT-2's head shape, scaled down: Vp = V + 47 columns; bf16 logits as under autocast.
  const int64_t N = 64, V = 1000, Vp = 1047;
  const Tensor target = make_targets(N, V, 91, 0);
  const Tensor w = random_tensor({N, Vp}, kBFloat16, 92).requires_grad_();
  int64_t old_n = 0, fused_n = 0;
  for (bool fused : {false, true}) {
    Tensor logits = mul(w, 1.0).reshape({2, N / 2, Vp});  // non-leaf [B,T,Vp], like lm_head's
    const int64_t n = dispatches_of([&] {
      Tensor loss =
          fused ? F::fused_cross_entropy_(logits, target.reshape({2, N / 2}), V)
                : F::cross_entropy(logits.slice(-1, 0, V).to(kFloat32).reshape({-1, V}), target);
      autograd::grad({loss}, {logits});
    });
    (fused ? fused_n : old_n) = n;
  }
  std::printf(
      "[fused_cross_entropy] loss forward+backward dispatches (+1 setup MulBackward): "
      "lm_loss path %lld, fused %lld\n",
      (long long)old_n, (long long)fused_n);
  // Both counts include the setup's MulBackward (autograd::grad runs the whole graph): the
  // fused loss itself is 3: the engine's ones() seed, fused_cross_entropy, its in-place scale.
  CHECK(fused_n == 4);
  CHECK(fused_n < old_n);
  // A whole tiny GPT step (forward + backward), bf16 autocast as the trainer's --amp bf16.
  auto m = tiny_gpt(kFloat32, 9);
  const Tensor idx = random_tensor({2, 8}, kInt64, 93, 0, 13);
  const Tensor y = random_tensor({2, 8}, kInt64, 94, 0, 13);
  int64_t step[2] = {0, 0};
  for (int fused = 0; fused < 2; ++fused) {
    m->zero_grad();
    step[fused] = dispatches_of([&] {
      Tensor loss;
      {
        amp::autocast ac(DeviceType::cpu);
        loss = fused ? m->forward(idx, y)
                     : F::cross_entropy(m->forward(idx).to(kFloat32).reshape({-1, 13}),
                                        y.reshape({-1}));
      }
      loss.backward();
    });
  }
  std::printf(
      "[fused_cross_entropy] tiny GPT forward+backward dispatches (bf16 autocast): "
      "lm_loss path %lld, forward(idx, targets) %lld\n",
      (long long)step[0], (long long)step[1]);
  CHECK(step[1] < step[0]);
}
