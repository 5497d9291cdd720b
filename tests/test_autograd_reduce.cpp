// Autograd of reductions, softmax and matmul: gradcheck (f64 finite differences) for sum,
// mean, var, std, amax/amin/max/min (ties split evenly), max/min(dim), logsumexp,
// softmax/log_softmax, matmul/mm/bmm (1-D operands, broadcast batch dims) and linear.
#include <doctest/doctest.h>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using autograd::gradcheck;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
void gc(const Fn& f, const std::vector<Tensor>& in) {
  auto r = gradcheck(f, in);
  CHECK_MESSAGE(r.ok, r.message);
}
}  // namespace

TEST_CASE("sum and mean: gradcheck over several dims, with and without keepdim") {
  Tensor x = leaf({2, 3, 4}, 1);
  for (bool keep : {false, true}) {
    gc([&](const auto& v) { return sum(v[0], {}, keep); }, {x});
    gc([&](const auto& v) { return sum(v[0], {0, 2}, keep); }, {x});
    gc([&](const auto& v) { return sum(v[0], {-1}, keep); }, {x});
    gc([&](const auto& v) { return mean(v[0], {1, -1}, keep); }, {x});
    gc([&](const auto& v) { return mean(v[0], {}, keep); }, {x});
  }
  Tensor s = leaf({}, 2);
  gc([](const auto& v) { return sum(v[0]); }, {s});
  gc([](const auto& v) { return mean(v[0]); }, {s});
}

TEST_CASE("sum and mean: hand-worked gradients") {
  Tensor x = leaf({2, 3}, 3);
  Tensor y = mean(x, {1});  // each element gets 1/3
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "MeanBackward");
  sum(y).backward();
  check_close(x.grad(), std::vector<double>(6, 1.0 / 3));
  // sum with an integer-free dtype change: grad comes back in the input dtype
  Tensor z = leaf({3}, 4);
  sum(z, {}, false, kFloat32).backward();
  CHECK(z.grad().dtype() == kFloat64);
  check_close(z.grad(), {1, 1, 1});
}

TEST_CASE("var and std: gradcheck with corrections") {
  Tensor x = leaf({3, 4}, 5);
  for (bool keep : {false, true})
    for (double c : {0.0, 1.0}) {
      gc([&](const auto& v) { return var(v[0], {1}, c, keep); }, {x});
      gc([&](const auto& v) { return var(v[0], {}, c, keep); }, {x});
      gc([&](const auto& v) { return minidl::std(v[0], {0}, c, keep); }, {x});
      gc([&](const auto& v) { return minidl::std(v[0], {0, 1}, c, keep); }, {x});
    }
}

TEST_CASE("amax/amin/max/min: gradcheck and ties split evenly") {
  Tensor x = leaf({3, 4}, 6);
  for (bool keep : {false, true}) {
    gc([&](const auto& v) { return amax(v[0], {1}, keep); }, {x});
    gc([&](const auto& v) { return amin(v[0], {0, 1}, keep); }, {x});
  }
  gc([](const auto& v) { return max(v[0]); }, {x});
  gc([](const auto& v) { return min(v[0]); }, {x});

  Tensor t = from_f64({1, 3, 3, 2, 5, 5, 5, 0}, {2, 4}, kFloat64);
  t.requires_grad_();
  sum(amax(t, {1})).backward();
  check_close(t.grad(), {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  Tensor u = from_f64({2, -1, 2, -1}, {4}, kFloat64);
  u.requires_grad_();
  max(u).backward();
  check_close(u.grad(), {0.5, 0, 0.5, 0});
  Tensor w = from_f64({2, -1, 2, -1}, {4}, kFloat64);
  w.requires_grad_();
  min(w).backward(from_f64({4}, {}, kFloat64));
  check_close(w.grad(), {0, 2, 0, 2});
}

TEST_CASE("max/min(dim): values route the gradient to the indices, indices have no history") {
  Tensor x = leaf({3, 4}, 7);
  for (bool keep : {false, true})
    for (int64_t d : {0, 1, -1}) {
      gc([&](const auto& v) { return max(v[0], d, keep).first; }, {x});
      gc([&](const auto& v) { return min(v[0], d, keep).first; }, {x});
    }
  Tensor t = from_f64({1, 4, 2, 9, 0, 3}, {2, 3}, kFloat64);
  t.requires_grad_();
  auto [vals, idx] = max(t, 1);
  CHECK(vals.grad_fn() != nullptr);
  CHECK(idx.grad_fn() == nullptr);
  CHECK(!idx.requires_grad());
  vals.backward(from_f64({10, 20}, {2}, kFloat64));
  check_close(t.grad(), {0, 10, 0, 20, 0, 0});
  Tensor s = leaf({}, 8);
  gc([](const auto& v) { return max(v[0], 0).first; }, {s});
}

TEST_CASE("logsumexp, softmax, log_softmax: gradcheck") {
  Tensor x = leaf({2, 3, 4}, 9);
  for (bool keep : {false, true}) {
    gc([&](const auto& v) { return logsumexp(v[0], {2}, keep); }, {x});
    gc([&](const auto& v) { return logsumexp(v[0], {0, 1}, keep); }, {x});
  }
  for (int64_t d : {0, 1, -1}) {
    gc([&](const auto& v) { return softmax(v[0], d); }, {x});
    gc([&](const auto& v) { return log_softmax(v[0], d); }, {x});
  }
  Tensor s = leaf({}, 10);
  gc([](const auto& v) { return softmax(v[0], 0); }, {s});
  gc([](const auto& v) { return log_softmax(v[0], 0); }, {s});
  // hand-worked: d/dx sum(log_softmax(x)) = 1 - n softmax(x); uniform x -> 1 - n/n = 0
  Tensor u = from_f64({0.5, 0.5, 0.5}, {3}, kFloat64);
  u.requires_grad_();
  sum(log_softmax(u, 0)).backward();
  check_close(u.grad(), {0, 0, 0});
}

TEST_CASE("matmul/mm/bmm: gradcheck incl. 1-D operands and broadcast batch dims") {
  Tensor a = leaf({3, 4}, 11), b = leaf({4, 2}, 12);
  gc([](const auto& v) { return mm(v[0], v[1]); }, {a, b});
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {a, b});
  Tensor v4 = leaf({4}, 13), w4 = leaf({4}, 14), v3 = leaf({3}, 15);
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {v4, w4});  // dot
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {a, v4});   // matrix-vector
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {v3, a});   // vector-matrix
  Tensor ba = leaf({2, 3, 4}, 16), bb = leaf({2, 4, 2}, 17);
  gc([](const auto& v) { return bmm(v[0], v[1]); }, {ba, bb});
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {ba, b});   // [2,3,4] x [4,2]
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {a, bb});   // [3,4] x [2,4,2]
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {ba, v4});  // [2,3,4] x [4]
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {v3, leaf({2, 3, 2}, 18)});
  Tensor pa = leaf({2, 1, 2, 3}, 19), pb = leaf({3, 3, 2}, 20);  // batch [2,1] x [3]
  gc([](const auto& v) { return matmul(v[0], v[1]); }, {pa, pb});
  // only one operand requires grad
  Tensor c = random_tensor({4, 2}, kFloat64, 21);
  gc([&](const auto& v) { return matmul(v[0], c); }, {a});
}

TEST_CASE("linear: one node, gradcheck for x, w, b") {
  Tensor x = leaf({2, 3, 4}, 23), w = leaf({5, 4}, 24), b = leaf({5}, 25);
  Tensor y = linear(x, w, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "LinearBackward");
  gc([](const auto& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  gc([](const auto& v) { return linear(v[0], v[1], Tensor()); }, {x, w});
  Tensor x2 = leaf({3, 4}, 26), w1 = leaf({4}, 27), b0 = leaf({}, 28);
  gc([](const auto& v) { return linear(v[0], v[1], v[2]); }, {x2, w1, b0});
  Tensor x1 = leaf({4}, 29);
  gc([](const auto& v) { return linear(v[0], v[1], v[2]); }, {x1, w, b});
  // hand-worked: y = x w^T + b, d sum(y)/db = batch count, d/dw = column sums of x
  Tensor xs = from_f64({1, 2, 3, 4}, {2, 2}, kFloat64);
  Tensor ws = leaf({3, 2}, 30), bs = leaf({3}, 31);
  sum(linear(xs, ws, bs)).backward();
  check_close(bs.grad(), {2, 2, 2});
  check_close(ws.grad(), {4, 6, 4, 6, 4, 6});
}

TEST_CASE("no history under NoGradGuard or without requires_grad") {
  Tensor x = leaf({2, 3}, 32), w = leaf({4, 3}, 33);
  {
    NoGradGuard no_grad;
    for (const Tensor& t : std::vector<Tensor>{
             sum(x), mean(x, {1}), var(x), minidl::std(x), amax(x, {0}), max(x), max(x, 1).first,
             logsumexp(x, {1}), softmax(x, 1), log_softmax(x, 0), matmul(x, x.t()), mm(x, x.t()),
             linear(x, w, Tensor()), sum_to_shape(x, {3})}) {
      CHECK(t.grad_fn() == nullptr);
      CHECK(!t.requires_grad());
    }
  }
  Tensor c = random_tensor({2, 3}, kFloat64, 34);
  CHECK(sum(c).grad_fn() == nullptr);
  CHECK(softmax(c, 0).grad_fn() == nullptr);
  CHECK(matmul(c, c.t()).grad_fn() == nullptr);
  CHECK(sum(x).grad_fn() != nullptr);
  CHECK(sum(x, {}, false, kInt64).grad_fn() == nullptr);  // integer result: no history
  CHECK(max(x, 0).second.grad_fn() == nullptr);
}

TEST_CASE("non-contiguous (transposed) inputs through differentiable views") {
  Tensor x = leaf({4, 3}, 36), y = leaf({4, 2}, 37);
  gc([](const auto& v) { return matmul(v[0].t(), v[1]); }, {x, y});
  gc([](const auto& v) { return linear(v[0].t(), v[1].t(), Tensor()); }, {x, leaf({4, 2}, 38)});
  gc([](const auto& v) { return sum(v[0].t(), {1}, true); }, {x});
  gc([](const auto& v) { return var(v[0].t(), {0}); }, {x});
  gc([](const auto& v) { return amax(v[0].t(), {1}); }, {x});
  gc([](const auto& v) { return max(v[0].t(), 0).first; }, {x});
  gc([](const auto& v) { return log_softmax(v[0].t(), 1); }, {x});
  gc([](const auto& v) { return logsumexp(v[0].t(), {0}); }, {x});
}

TEST_CASE("sum_to_shape: gradcheck") {
  Tensor x = leaf({2, 3, 4}, 35);
  gc([](const auto& v) { return sum_to_shape(v[0], {3, 1}); }, {x});
  gc([](const auto& v) { return sum_to_shape(v[0], {1, 3, 4}); }, {x});
}
