// Tensor's math methods (x.sum(), x.pow(2), x.argmax(1), ...) against the free functions they
// forward to: same values, same autograd node, same gradients; chained method forms; the
// Scalar comparison operators.
#include <doctest/doctest.h>

#include <functional>

#include "autograd/gradcheck.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `method` and `free_fn` on fresh copies of the same f64 leaves: equal values (bitwise),
// equal grad_fn names, equal gradients of a fixed random projection of the output.
void same(const Fn& method, const Fn& free_fn, const std::vector<Tensor>& inputs) {
  auto fresh = [&] {
    std::vector<Tensor> v;
    for (const Tensor& t : inputs) {
      Tensor c = t.detach().clone();
      if (t.requires_grad()) c.requires_grad_();
      v.push_back(c);
    }
    return v;
  };
  std::vector<Tensor> a = fresh(), b = fresh();
  Tensor ya = method(a), yb = free_fn(b);
  REQUIRE(ya.shape() == yb.shape());
  CHECK(ya.dtype() == yb.dtype());
  CHECK(bitwise_equal(ya, yb));
  CHECK(ya.requires_grad() == yb.requires_grad());
  if (!ya.requires_grad()) return;
  REQUIRE(ya.grad_fn() != nullptr);
  CHECK(ya.grad_fn()->name() == yb.grad_fn()->name());
  Tensor proj = random_tensor(ya.shape(), ya.dtype(), 99);
  minidl::sum(minidl::mul(ya, proj)).backward();
  minidl::sum(minidl::mul(yb, proj)).backward();
  bool any = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    REQUIRE(a[i].grad().defined() == b[i].grad().defined());  // an unused input gets none
    if (!a[i].grad().defined()) continue;
    any = true;
    CHECK(bitwise_equal(a[i].grad(), b[i].grad()));
  }
  CHECK(any);
}
}  // namespace

TEST_CASE("tensor methods: unary methods equal their free functions") {
  Tensor x = leaf({3, 4}, 1);
  Tensor pos = leaf({3, 4}, 2, 0.5, 2.0);
  struct U {
    std::string name;
    std::function<Tensor(const Tensor&)> m, f;
    bool positive = false;
  };
  std::vector<U> ops = {
      {"neg", [](const Tensor& t) { return t.neg(); }, [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return t.abs(); }, [](const Tensor& t) { return abs(t); }},
      {"exp", [](const Tensor& t) { return t.exp(); }, [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return t.log(); }, [](const Tensor& t) { return log(t); },
       true},
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }, [](const Tensor& t) { return sqrt(t); },
       true},
      {"rsqrt", [](const Tensor& t) { return t.rsqrt(); }, [](const Tensor& t) { return rsqrt(t); },
       true},
      {"log1p", [](const Tensor& t) { return t.log1p(); }, [](const Tensor& t) { return log1p(t); },
       true},
      {"square", [](const Tensor& t) { return t.square(); },
       [](const Tensor& t) { return square(t); }},
      {"sin", [](const Tensor& t) { return t.sin(); }, [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return t.cos(); }, [](const Tensor& t) { return cos(t); }},
      {"tanh", [](const Tensor& t) { return t.tanh(); }, [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return t.sigmoid(); },
       [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return t.relu(); }, [](const Tensor& t) { return relu(t); }},
      {"gelu", [](const Tensor& t) { return t.gelu("tanh"); },
       [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"silu", [](const Tensor& t) { return t.silu(); }, [](const Tensor& t) { return silu(t); }},
      {"erf", [](const Tensor& t) { return t.erf(); }, [](const Tensor& t) { return erf(t); }},
      {"sign", [](const Tensor& t) { return t.sign(); }, [](const Tensor& t) { return sign(t); }},
      {"clamp", [](const Tensor& t) { return t.clamp(-0.3, 0.4); },
       [](const Tensor& t) { return clamp(t, -0.3, 0.4); }},
      {"clamp_min", [](const Tensor& t) { return t.clamp_min(0.1); },
       [](const Tensor& t) { return clamp(t, 0.1, std::nullopt); }},
      {"clamp_max", [](const Tensor& t) { return t.clamp_max(0.1); },
       [](const Tensor& t) { return clamp(t, std::nullopt, 0.1); }},
      {"pow", [](const Tensor& t) { return t.pow(3); },
       [](const Tensor& t) { return pow(t, Scalar(3)); }},
      {"softmax", [](const Tensor& t) { return t.softmax(1); },
       [](const Tensor& t) { return softmax(t, 1); }},
      {"log_softmax", [](const Tensor& t) { return t.log_softmax(0); },
       [](const Tensor& t) { return log_softmax(t, 0); }},
      {"tril", [](const Tensor& t) { return t.tril(1); },
       [](const Tensor& t) { return tril(t, 1); }},
      {"triu", [](const Tensor& t) { return t.triu(); }, [](const Tensor& t) { return triu(t); }},
      {"cumsum", [](const Tensor& t) { return t.cumsum(1); },
       [](const Tensor& t) { return cumsum(t, 1); }},
  };
  for (const U& u : ops) {
    CAPTURE(u.name);
    same([&](const auto& v) { return u.m(v[0]); }, [&](const auto& v) { return u.f(v[0]); },
         {u.positive ? pos : x});
  }
}

TEST_CASE("tensor methods: binary methods and operators equal their free functions") {
  Tensor a = leaf({2, 3}, 3), b = leaf({3}, 4, 0.5, 1.5);
  auto both = [&](std::string name, const Fn& m, const Fn& f) {
    CAPTURE(name);
    same(m, f, {a, b});
  };
  both(
      "add", [](const auto& v) { return v[0].add(v[1]); },
      [](const auto& v) { return add(v[0], v[1]); });
  both(
      "add alpha", [](const auto& v) { return v[0].add(v[1], 2.5); },
      [](const auto& v) { return add(v[0], v[1], 2.5); });
  both(
      "sub alpha", [](const auto& v) { return v[0].sub(v[1], -1.5); },
      [](const auto& v) { return sub(v[0], v[1], -1.5); });
  both(
      "mul", [](const auto& v) { return v[0].mul(v[1]); },
      [](const auto& v) { return mul(v[0], v[1]); });
  both(
      "div", [](const auto& v) { return v[0].div(v[1]); },
      [](const auto& v) { return div(v[0], v[1]); });
  both(
      "pow tensor", [](const auto& v) { return v[1].pow(v[0]); },
      [](const auto& v) { return pow(v[1], v[0]); });
  both(
      "maximum", [](const auto& v) { return v[0].maximum(v[1]); },
      [](const auto& v) { return maximum(v[0], v[1]); });
  both(
      "minimum", [](const auto& v) { return v[0].minimum(v[1]); },
      [](const auto& v) { return minimum(v[0], v[1]); });
  both(
      "a * 2 + b", [](const auto& v) { return v[0] * 2 + v[1]; },
      [](const auto& v) { return add(mul(v[0], Scalar(2)), v[1]); });
  both(
      "2 - a / b", [](const auto& v) { return 2 - v[0] / v[1]; },
      [](const auto& v) { return sub(full({}, 2, kFloat64), div(v[0], v[1])); });
  both(
      "-a", [](const auto& v) { return -v[0]; }, [](const auto& v) { return neg(v[0]); });
  both(
      "matmul", [](const auto& v) { return v[0].matmul(v[1]); },
      [](const auto& v) { return matmul(v[0], v[1]); });
  // scalar forms
  same([](const auto& v) { return v[0].add(1.5); }, [](const auto& v) { return add(v[0], 1.5); },
       {a});
  same([](const auto& v) { return v[0].sub(1.5); }, [](const auto& v) { return sub(v[0], 1.5); },
       {a});
  same([](const auto& v) { return v[0].mul(-3); }, [](const auto& v) { return mul(v[0], -3); },
       {a});
  same([](const auto& v) { return v[0].div(4); }, [](const auto& v) { return div(v[0], 4); }, {a});
  Tensor m = leaf({3, 4}, 5), n = leaf({4, 2}, 6);
  same([](const auto& v) { return v[0].mm(v[1]); }, [](const auto& v) { return mm(v[0], v[1]); },
       {m, n});
  Tensor p = leaf({2, 3, 4}, 7), q = leaf({2, 4, 5}, 8);
  same([](const auto& v) { return v[0].bmm(v[1]); }, [](const auto& v) { return bmm(v[0], v[1]); },
       {p, q});
}

TEST_CASE("tensor methods: reductions equal their free functions") {
  Tensor x = leaf({2, 3, 4}, 9);
  struct R {
    std::string name;
    Fn m, f;
  };
  std::vector<R> ops = {
      {"sum()", [](const auto& v) { return v[0].sum(); }, [](const auto& v) { return sum(v[0]); }},
      {"sum(1)", [](const auto& v) { return v[0].sum(1); },
       [](const auto& v) { return sum(v[0], {1}); }},
      {"sum(-1, true)", [](const auto& v) { return v[0].sum(-1, true); },
       [](const auto& v) { return sum(v[0], {-1}, true); }},
      {"sum({0, 2})",
       [](const auto& v) {
         return v[0].sum({0, 2});
       },
       [](const auto& v) {
         return sum(v[0], {0, 2});
       }},
      {"sum(kFloat32)", [](const auto& v) { return v[0].sum(kFloat32); },
       [](const auto& v) { return sum(v[0], {}, false, kFloat32); }},
      {"mean()", [](const auto& v) { return v[0].mean(); },
       [](const auto& v) { return mean(v[0]); }},
      {"mean(1, true)", [](const auto& v) { return v[0].mean(1, true); },
       [](const auto& v) { return mean(v[0], {1}, true); }},
      {"mean({0, 1})",
       [](const auto& v) {
         return v[0].mean({0, 1});
       },
       [](const auto& v) {
         return mean(v[0], {0, 1});
       }},
      {"var()", [](const auto& v) { return v[0].var(); }, [](const auto& v) { return var(v[0]); }},
      {"var(1, 0)", [](const auto& v) { return v[0].var(1, 0); },
       [](const auto& v) { return var(v[0], {1}, 0); }},
      {"std({0, 2}, 1, true)",
       [](const auto& v) {
         return v[0].std({0, 2}, 1, true);
       },
       [](const auto& v) {
         return minidl::std(v[0], {0, 2}, 1, true);
       }},
      {"std(2)", [](const auto& v) { return v[0].std(2); },
       [](const auto& v) { return minidl::std(v[0], {2}); }},
      {"amax", [](const auto& v) { return v[0].amax({1}); },
       [](const auto& v) { return amax(v[0], {1}); }},
      {"amin",
       [](const auto& v) {
         return v[0].amin({0, 2}, true);
       },
       [](const auto& v) {
         return amin(v[0], {0, 2}, true);
       }},
      {"max()", [](const auto& v) { return v[0].max(); }, [](const auto& v) { return max(v[0]); }},
      {"min()", [](const auto& v) { return v[0].min(); }, [](const auto& v) { return min(v[0]); }},
      {"max(1).values", [](const auto& v) { return v[0].max(1).first; },
       [](const auto& v) { return max(v[0], 1).first; }},
      {"min(2, true).values", [](const auto& v) { return v[0].min(2, true).first; },
       [](const auto& v) { return min(v[0], 2, true).first; }},
      {"logsumexp", [](const auto& v) { return v[0].logsumexp({2}); },
       [](const auto& v) { return logsumexp(v[0], {2}); }},
  };
  for (const R& r : ops) {
    CAPTURE(r.name);
    same(r.m, r.f, {x});
  }
  // indices: max/min(dim) second, argmax/argmin
  CHECK(bitwise_equal(x.max(1).second, max(x, 1).second));
  CHECK(bitwise_equal(x.min(0, true).second, min(x, 0, true).second));
  CHECK(bitwise_equal(x.argmax(1), argmax(x, 1)));
  CHECK(bitwise_equal(x.argmax(), argmax(x)));
  CHECK(bitwise_equal(x.argmin(-1, true), argmin(x, -1, true)));
  CHECK(x.argmax(1).dtype() == kInt64);
  CHECK(x.argmax(1).shape() == Shape{2, 4});
}

TEST_CASE("tensor methods: comparisons, indexing, in-place forms") {
  Tensor a = from_f64({1, 5, 3, 2}, {4}), b = from_f64({1, 4, 3, 7}, {4});
  CHECK(a.eq(b).tolist<bool>() == std::vector<bool>{true, false, true, false});
  CHECK(a.ne(b).tolist<bool>() == std::vector<bool>{false, true, false, true});
  CHECK(a.lt(b).tolist<bool>() == std::vector<bool>{false, false, false, true});
  CHECK(a.le(b).tolist<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(a.gt(b).tolist<bool>() == std::vector<bool>{false, true, false, false});
  CHECK(a.ge(b).tolist<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(bitwise_equal(a.gt(2), gt(a, 2)));
  CHECK(bitwise_equal(a.eq(3), eq(a, 3)));
  // Scalar operators on either side
  CHECK(bitwise_equal(a > 2, gt(a, 2)));
  CHECK(bitwise_equal(a <= 2, le(a, 2)));
  CHECK(bitwise_equal(a == 3, eq(a, 3)));
  CHECK(bitwise_equal(a != 3, ne(a, 3)));
  CHECK(bitwise_equal(2 < a, gt(a, 2)));
  CHECK(bitwise_equal(2 >= a, le(a, 2)));
  CHECK(bitwise_equal(3 == a, eq(a, 3)));

  Tensor x = leaf({3, 4}, 10);
  Tensor idx = tensor(std::vector<int64_t>{2, 0});
  same([&](const auto& v) { return v[0].index_select(0, idx); },
       [&](const auto& v) { return index_select(v[0], 0, idx); }, {x});
  Tensor gi = tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 0}, Shape{3, 2});
  same([&](const auto& v) { return v[0].gather(1, gi); },
       [&](const auto& v) { return gather(v[0], 1, gi); }, {x});
  Tensor mask = x.detach() > 0;
  same([&](const auto& v) { return v[0].masked_fill(mask, -1.0); },
       [&](const auto& v) { return masked_fill(v[0], mask, -1.0); }, {x});

  Tensor y = from_f64({1, 2, 3}, {3}, kFloat64), z = from_f64({4, 5, 6}, {3}, kFloat64);
  Tensor y2 = y.clone();
  CHECK(&y.add_(z, 2) == &y);
  add_(y2, z, 2);
  CHECK(bitwise_equal(y, y2));
  check_close(y, {9, 12, 15});
  y.sub_(z).mul_(z).div_(z).mul_(0.5).add_(1);  // (y - z) / 2 + 1
  check_close(y, {3.5, 4.5, 5.5});
  y.sub_(z, -1);  // y + z
  check_close(y, {7.5, 9.5, 11.5});
  y.clamp_(8, 11);
  check_close(y, {8, 9.5, 11});
}

TEST_CASE("tensor methods: chained forms record the same graph as the free functions") {
  // x.pow(2).sum().backward(): d/dx = 2x
  Tensor x = leaf({2, 3}, 11);
  Tensor s = x.pow(2).sum();
  CHECK(s.dim() == 0);
  s.backward();
  check_close(x.grad(), mul(x.detach(), 2));
  // (a * 2 + b).mean(): d/da = 2/n, d/db = 1/n
  Tensor a = leaf({2, 3}, 12), b = leaf({2, 3}, 13);
  Tensor m = (a * 2 + b).mean();
  check_close(m, mean(add(mul(a.detach(), 2), b.detach())));
  m.backward();
  check_close(a.grad(), std::vector<double>(6, 2.0 / 6));
  check_close(b.grad(), std::vector<double>(6, 1.0 / 6));
  // logits.log_softmax(1).max(1).first.exp().sum() through gradcheck
  auto r = autograd::gradcheck(
      [](const auto& v) {
        return v[0].matmul(v[1]).relu().log_softmax(1).max(1).first.exp().sum() +
               v[0].abs().sqrt().mean({0}).square().sum() * 0.5;
      },
      {leaf({3, 4}, 14, 0.2, 1.0), leaf({4, 5}, 15)});
  CHECK_MESSAGE(r.ok, r.message);
  // x.argmax(1): the predicted classes, as the free function
  Tensor logits = from_f64({0.1, 0.7, 0.2, 0.9, 0.05, 0.05}, {2, 3});
  CHECK(logits.argmax(1).tolist<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(logits.softmax(-1).sum(1).tolist<double>().size() == 2);
  check_close(logits.softmax(-1).sum(1), {1.0, 1.0});
}
