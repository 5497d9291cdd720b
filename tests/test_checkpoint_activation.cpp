// Activation checkpointing (nn::checkpoint / autograd::checkpoint): gradients equal the plain
// forward's in f64 (with dropout: the RNG stream is replayed), fewer live bytes after the
// forward, parameters reached through the module overload and autograd::grad; InferenceMode.
#include <doctest/doctest.h>

#include "nn/checkpoint.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {

// A block: tanh(fc2(dropout(gelu(fc1(x))))), f64.
struct Block : nn::Cloneable<Block> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  double p;
  Block(int64_t d, double p_) : p(p_) {
    fc1 = std::make_shared<nn::Linear>(d, 2 * d);
    fc2 = std::make_shared<nn::Linear>(2 * d, d);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    return tanh(fc2->forward(F::dropout(gelu(fc1->forward(x)), p, is_training())));
  }
};

struct Stack {
  std::vector<std::shared_ptr<Block>> blocks;
  Stack(int n, int64_t d, double p) {
    manual_seed(123);
    for (int i = 0; i < n; ++i) blocks.push_back(std::make_shared<Block>(d, p));
  }
  Tensor forward(Tensor x, bool ckpt) {
    for (auto& b : blocks) x = ckpt ? nn::checkpoint(*b, x) : b->forward(x);
    return x;
  }
  std::vector<Tensor> params() {
    std::vector<Tensor> ps;
    for (auto& b : blocks)
      for (const Tensor& t : b->parameters()) ps.push_back(t);
    return ps;
  }
  void zero_grad() {
    for (auto& b : blocks) b->zero_grad();
  }
};

struct Grads {
  Tensor out, gx;
  std::vector<Tensor> gp;
  uint64_t offset_after;
};

Grads run(Stack& s, const Tensor& x0, bool ckpt, bool x_requires_grad) {
  s.zero_grad();
  Tensor x = x0.detach().clone();
  if (x_requires_grad) x.requires_grad_();
  manual_seed(7);
  Tensor out = s.forward(x, ckpt);
  Tensor loss = sum(mul(out, out));
  loss.backward();
  Grads g{out, x_requires_grad ? x.grad() : Tensor(), {}, default_generator().offset()};
  for (const Tensor& p : s.params()) g.gp.push_back(p.grad());
  return g;
}

void check_same(const Grads& a, const Grads& b) {
  check_close(a.out, b.out, 1e-12, 1e-12);
  if (a.gx.defined()) check_close(a.gx, b.gx, 1e-12, 1e-12);
  REQUIRE(a.gp.size() == b.gp.size());
  for (size_t i = 0; i < a.gp.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a.gp[i].defined());
    REQUIRE(b.gp[i].defined());
    check_close(a.gp[i], b.gp[i], 1e-12, 1e-12);
  }
}

}  // namespace

TEST_CASE("checkpoint: gradients equal the plain forward's in f64, without and with dropout") {
  Tensor x = random_tensor({6, 8}, kFloat64, 1);
  for (double p : {0.0, 0.3}) {
    CAPTURE(p);
    Stack s(3, 8, p);
    Grads plain = run(s, x, false, true), ckpt = run(s, x, true, true);
    check_same(plain, ckpt);
    // the recomputation replays the stream and puts the generator back: the caller's stream
    // continues as without checkpointing
    CHECK(ckpt.offset_after == plain.offset_after);
    if (p > 0) {
      // without replaying the RNG state the recomputed masks differ: the test can see it
      s.zero_grad();
      Tensor xi = x.detach().clone();
      xi.requires_grad_();
      manual_seed(7);
      Tensor out = xi;
      for (auto& b : s.blocks)
        out = nn::checkpoint([&b](const Tensor& t) { return b->forward(t); }, out, b->parameters(),
                             /*preserve_rng_state=*/false);
      sum(mul(out, out)).backward();
      CHECK_FALSE(allclose(xi.grad(), plain.gx, 1e-6, 1e-6));
    }
  }
}

TEST_CASE("checkpoint: parameters get gradients when the input does not require grad") {
  Tensor x = random_tensor({5, 8}, kFloat64, 2);
  Stack s(2, 8, 0.2);
  Grads plain = run(s, x, false, false), ckpt = run(s, x, true, false);
  check_same(plain, ckpt);
  // autograd::grad through the checkpoint node (the params are inputs of the node)
  s.zero_grad();
  manual_seed(7);
  Tensor out = s.forward(x, true);
  auto gs = autograd::grad({sum(mul(out, out))}, s.params());
  for (size_t i = 0; i < gs.size(); ++i) {
    check_close(gs[i], plain.gp[i], 1e-12, 1e-12);
    CHECK_FALSE(s.params()[i].grad().defined());  // grad() leaves .grad alone
  }
}

TEST_CASE("checkpoint: several inputs and outputs, unused outputs, gradcheck, reentrant params") {
  Tensor a = leaf({3, 4}, 3), b = leaf({4, 2}, 4), w = leaf({3, 2}, 5);
  auto fn = [w](const std::vector<Tensor>& in) {
    Tensor y = matmul(sin(in[0]), in[1]);
    return std::vector<Tensor>{mul(y, w), exp(in[1]), argmax(y)};  // w: not listed
  };
  auto outs = autograd::checkpoint(fn, {a, b});
  REQUIRE(outs.size() == 3);
  CHECK(outs[2].dtype() == kInt64);
  CHECK_FALSE(outs[2].requires_grad());
  sum(outs[0]).backward();  // outs[1] unused: a zero gradient
  Tensor ga = a.grad().clone(), gb = b.grad().clone(), gw = w.grad().clone();
  a.mutable_grad() = Tensor();
  b.mutable_grad() = Tensor();
  w.mutable_grad() = Tensor();
  sum(fn({a, b})[0]).backward();
  check_close(ga, a.grad(), 1e-12, 1e-12);
  check_close(gb, b.grad(), 1e-12, 1e-12);
  check_close(gw, w.grad(), 1e-12, 1e-12);  // accumulated in the inner backward
  GRADCHECK(
      [](const std::vector<Tensor>& in) {
        auto f = [](const std::vector<Tensor>& x) {
          return std::vector<Tensor>{tanh(matmul(x[0], x[1])), x[0]};
        };
        auto o = autograd::checkpoint(f, in);
        return add(sum(o[0]), sum(mul(o[1], o[1])));
      },
      {a, b});
  // saved inputs are version-checked
  Tensor c = leaf({3}, 6);
  Tensor d = mul(c, 2.0);
  Tensor y = nn::checkpoint([](const Tensor& t) { return exp(t); }, d);
  {
    NoGradGuard ng;
    add_(d, Scalar(1));
  }
  CHECK_THROWS_AS(sum(y).backward(), Error);
}

TEST_CASE("checkpoint: fewer live bytes after the forward than the plain forward") {
  const int64_t d = 64, n = 256;
  Stack s(6, d, 0.0);
  Tensor x = random_tensor({n, d}, kFloat64, 9);
  x.requires_grad_();
  auto live_after_forward = [&](bool ckpt, int64_t& live) {
    const int64_t base = memory_stats(kCPU).allocated;
    Tensor out = s.forward(x, ckpt);
    live = memory_stats(kCPU).allocated - base;  // output + what the graph keeps
    sum(out).backward();
  };
  int64_t plain = 0, ckpt = 0;
  live_after_forward(false, plain);
  s.zero_grad();
  x.mutable_grad() = Tensor();
  live_after_forward(true, ckpt);
  // plain keeps per block ~ the [n,2d] fc1 output, gelu output, the [n,d] fc2 output and tanh
  // output (6 blocks); checkpointed: the block outputs only (each the next block's saved input)
  const int64_t act = n * d * 8;
  INFO("live after forward: plain ", plain, " bytes, checkpointed ", ckpt, " bytes");
  CHECK(plain >= 6 * 4 * act);
  CHECK(ckpt <= 6 * act + act);
  CHECK(ckpt * 3 < plain);
}

TEST_CASE("InferenceMode: no history inside, flag nests, inference_mode(false)") {
  Tensor w = leaf({3}, 8);
  CHECK_FALSE(InferenceMode::is_enabled());
  {
    InferenceMode guard;
    CHECK(InferenceMode::is_enabled());
    CHECK_FALSE(GradMode::is_enabled());
    Tensor y = mul(w, 2.0);
    CHECK_FALSE(y.requires_grad());
    {
      InferenceMode off(false);
      CHECK_FALSE(InferenceMode::is_enabled());
      CHECK_FALSE(GradMode::is_enabled());  // grad mode left as it was
    }
    CHECK(InferenceMode::is_enabled());
  }
  CHECK_FALSE(InferenceMode::is_enabled());
  CHECK(GradMode::is_enabled());
  CHECK(mul(w, 2.0).requires_grad());
}
