// Autograd engine tests with small differentiable functions built in the test through
// autograd::record: chain rule, accumulation, retain_graph, in-place detection, tensor and
// post-accumulate hooks, end-of-backward callbacks, autograd::grad, grad mode, gradcheck.
#include <doctest/doctest.h>

#include <atomic>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using autograd::record;

namespace {
std::atomic<int> g_mul_backward_calls{0};

Tensor t_mul(const Tensor& a, const Tensor& b) {
  Tensor out = mul(a, b);
  record("MulBackward", {a, b}, {&out}, {a, b}, [](const auto& g, const auto& s) {
    ++g_mul_backward_calls;
    return std::vector<Tensor>{mul(g[0], s[1]), mul(g[0], s[0])};
  });
  return out;
}
Tensor t_exp(const Tensor& x) {
  Tensor out = exp(x);
  record("ExpBackward", {x}, {&out}, {out},
         [](const auto& g, const auto& s) { return std::vector<Tensor>{mul(g[0], s[0])}; });
  return out;
}
Tensor t_sum(const Tensor& x) {
  Tensor out = sum(x);
  Shape shape = x.shape();
  record("SumBackward", {x}, {&out}, {}, [shape](const auto& g, const auto&) {
    return std::vector<Tensor>{g[0].expand(shape).contiguous()};
  });
  return out;
}
// Two outputs (first half, second half of a 1-D tensor): exercises undefined slot grads.
std::pair<Tensor, Tensor> t_halves(const Tensor& x) {
  const int64_t n = x.size(0) / 2;
  Tensor a = x.narrow(0, 0, n).contiguous().clone(), b = x.narrow(0, n, n).contiguous().clone();
  record("HalvesBackward", {x}, {&a, &b}, {}, [n](const auto& g, const auto&) {
    Tensor gx = zeros({2 * n}, kFloat64);
    if (g[0].defined()) gx.narrow(0, 0, n).copy_(g[0]);
    if (g[1].defined()) gx.narrow(0, n, n).copy_(g[1]);
    return std::vector<Tensor>{gx};
  });
  return {a, b};
}
}  // namespace

TEST_CASE("chain rule through a small graph") {
  Tensor x = leaf({5}, 1);
  Tensor y = t_sum(t_mul(t_exp(x), x));  // d/dx = exp(x) * (x + 1)
  CHECK(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "SumBackward");
  CHECK(!y.is_leaf());
  y.backward();
  std::vector<double> xs = to_f64(x), expect;
  for (double v : xs) expect.push_back(std::exp(v) * (v + 1));
  check_close(x.grad(), expect);
}

TEST_CASE("each node runs once in a diamond and gradients of shared inputs add up") {
  Tensor x = leaf({4}, 2);
  Tensor a = t_exp(x);
  g_mul_backward_calls = 0;
  Tensor y = t_sum(t_mul(t_mul(a, a), t_mul(a, x)));  // a^3 x
  y.backward();
  CHECK(g_mul_backward_calls == 3);
  std::vector<double> expect;
  for (double v : to_f64(x)) expect.push_back(std::exp(3 * v) * (3 * v + 1));
  check_close(x.grad(), expect, 1e-10, 1e-10);
}

TEST_CASE("grads accumulate across backward calls and retain_graph allows a second pass") {
  Tensor x = leaf({3}, 3);
  Tensor y = t_sum(t_mul(x, x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  std::vector<double> expect;
  for (double v : to_f64(x)) expect.push_back(4 * v);
  check_close(x.grad(), expect);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("second time"), Error);
  // a graph without saved tensors can run again, as in PyTorch
  Tensor z = t_sum(x);
  z.backward();
  z.backward();
}

TEST_CASE("an in-place change to a saved tensor is detected and named") {
  Tensor x = leaf({3}, 4);
  Tensor a = t_exp(x);
  Tensor y = t_sum(a);
  Tensor y2 = t_sum(t_mul(a, a));
  {
    NoGradGuard guard;  // in grad mode in-place ops on tensors with history are refused
    a.fill_(1.0);       // a is saved by the MulBackward (and by ExpBackward as its output)
  }
  CHECK_THROWS_WITH_AS(y2.backward(), doctest::Contains("modified by an in-place operation"),
                       Error);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("ExpBackward"), Error);
}

TEST_CASE("multi-output nodes get undefined gradients for unused outputs") {
  Tensor x = leaf({6}, 5);
  auto [a, b] = t_halves(x);
  t_sum(t_exp(b)).backward();
  std::vector<double> xs = to_f64(x), expect(6, 0.0);
  for (int i = 3; i < 6; ++i) expect[size_t(i)] = std::exp(xs[size_t(i)]);
  check_close(x.grad(), expect);
}

TEST_CASE("tensor hooks replace gradients, retain_grad keeps non-leaf grads") {
  Tensor x = leaf({3}, 6);
  x.register_hook([](const Tensor& g) { return mul(g, 2.0); });
  Tensor a = t_exp(x);
  a.retain_grad();
  a.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  t_sum(a).backward();
  check_close(a.grad(), std::vector<double>(3, 1.0));  // retain_grad sees the incoming grad
  std::vector<double> expect;
  for (double v : to_f64(x)) expect.push_back(20 * std::exp(v));
  check_close(x.grad(), expect);
  Tensor c = zeros({2}, kFloat64);
  CHECK_THROWS_WITH_AS(c.register_hook([](const Tensor& g) { return g; }),
                       doctest::Contains("doesn't require gradient"), Error);
}

TEST_CASE("post-accumulate-grad hooks fire once with the final grad, then callbacks run") {
  Tensor w = leaf({4}, 7), v = leaf({4}, 8);
  std::vector<std::string> events;
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](Tensor& g) {
    events.push_back("w");
    seen = to_f64(g);
    autograd::queue_callback([&] { events.push_back("end"); });
  });
  v.register_post_accumulate_grad_hook([&](Tensor&) { events.push_back("v"); });
  Tensor y = t_sum(t_mul(t_mul(w, w), v));  // w used twice: one accumulation, one hook call
  y.backward();
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  CHECK(std::count(events.begin(), events.end(), "w") == 1);
  std::vector<double> ws = to_f64(w), vs = to_f64(v), expect;
  for (size_t i = 0; i < ws.size(); ++i) expect.push_back(2 * ws[i] * vs[i]);
  check_close(w.grad(), expect);
  CHECK(seen == to_f64(w.grad()));
  CHECK_THROWS_WITH_AS(autograd::queue_callback([] {}), doctest::Contains("no backward"), Error);
  CHECK(!autograd::in_backward());
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor x = leaf({3}, 9);
  Tensor y = t_sum(t_mul(x, x));
  auto g = autograd::grad({y}, {x});
  REQUIRE(g.size() == 1);
  std::vector<double> expect;
  for (double v : to_f64(x)) expect.push_back(2 * v);
  check_close(g[0], expect);
  CHECK(!x.grad().defined());
}

TEST_CASE("grad mode, requires_grad rules and backward errors") {
  Tensor x = leaf({3}, 10);
  {
    NoGradGuard guard;
    CHECK(!GradMode::is_enabled());
    Tensor y = t_exp(x);
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(GradMode::is_enabled());
  Tensor y = t_exp(x);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("only for scalar outputs"), Error);
  CHECK_THROWS_WITH_AS(y.requires_grad_(false), doctest::Contains("leaf"), Error);
  Tensor i = zeros({2}, kInt64);
  CHECK_THROWS_WITH_AS(i.requires_grad_(), doctest::Contains("floating point"), Error);
  CHECK_THROWS_WITH_AS(zeros({1}).backward(), doctest::Contains("does not require grad"), Error);
  Tensor d = y.detach();
  CHECK(!d.requires_grad());
  CHECK(d.shares_storage(y));
  y.backward(ones({3}, kFloat64));
  check_close(x.grad(), to_f64(exp(x)));
}

TEST_CASE("saving a node's output does not leak the graph") {
  std::weak_ptr<TensorImpl> out_impl;
  std::weak_ptr<Node> node;
  {
    Tensor x = leaf({3}, 11);
    Tensor y = t_exp(x);
    out_impl = y.impl_ptr();
    node = y.grad_fn();
  }
  CHECK(out_impl.expired());
  CHECK(node.expired());
}

TEST_CASE("gradcheck accepts correct gradients and rejects a wrong one") {
  Tensor a = leaf({2, 3}, 12), b = leaf({2, 3}, 13);
  auto ok = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return t_mul(t_exp(in[0]), in[1]); }, {a, b});
  CHECK_MESSAGE(ok.ok, ok.message);
  CHECK(ok.max_abs_error < 1e-6);
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor out = exp(in[0]);
    record("WrongExpBackward", {in[0]}, {&out}, {in[0]}, [](const auto& g, const auto& s) {
      return std::vector<Tensor>{mul(g[0], s[0])};  // x instead of exp(x)
    });
    return out;
  };
  auto bad = autograd::gradcheck(wrong, {a});
  CHECK(!bad.ok);
  CHECK(bad.message.find("input 0") != std::string::npos);
}
