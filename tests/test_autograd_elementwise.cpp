// Autograd of the elementwise frontends (tensor/ops/unary.cpp, tensor/ops/binary.cpp): f64
// gradchecks with broadcasting, 0-d and non-contiguous operands, hand-worked gradients (ties,
// masks, dtype casts), no history under NoGradGuard, and the in-place errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Magnitudes in [0.2, 1.2] with random signs: away from the kinks of abs/relu at 0.
Tensor signed_leaf(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.2, 1.2);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  Tensor x = from_f64(v, shape, kFloat64);
  x.requires_grad_();
  return x;
}
Tensor leaf_of(const std::vector<double>& v, const Shape& shape) {
  Tensor x = from_f64(v, shape, kFloat64);
  x.requires_grad_();
  return x;
}
// f applied to the transposes of its (2-d, contiguous) inputs: non-contiguous operands.
Fn transposed(const Fn& f) {
  return [f](const std::vector<Tensor>& in) {
    std::vector<Tensor> t;
    for (const Tensor& x : in) t.push_back(x.t());
    return f(t);
  };
}
void check_gradcheck(const Fn& f, const std::vector<Tensor>& inputs) {
  auto r = autograd::gradcheck(f, inputs);
  CHECK_MESSAGE(r.ok, r.message);
}
Fn un(Tensor (*op)(const Tensor&)) {
  return [op](const std::vector<Tensor>& in) { return op(in[0]); };
}
}  // namespace

TEST_CASE("unary ops pass gradcheck (contiguous and strided)") {
  struct Case {
    const char* name;
    Fn f;
    double lo, hi;  // input range (signed magnitudes in [0.2, 1.2] when lo == hi)
  };
  const std::vector<Case> cases = {
      {"neg", un(neg), -2, 2},
      {"abs", un(abs), 0, 0},
      {"relu", un(relu), 0, 0},
      {"exp", un(exp), -2, 2},
      {"log", un(log), 0.3, 3},
      {"log1p", un(log1p), -0.5, 2},
      {"sqrt", un(sqrt), 0.3, 3},
      {"rsqrt", un(rsqrt), 0.3, 3},
      {"sin", un(sin), -3, 3},
      {"cos", un(cos), -3, 3},
      {"tanh", un(tanh), -2, 2},
      {"sigmoid", un(sigmoid), -3, 3},
      {"silu", un(silu), -3, 3},
      {"erf", un(erf), -2, 2},
      {"square", un(square), -2, 2},
      {"gelu", [](const std::vector<Tensor>& in) { return gelu(in[0]); }, -3, 3},
      {"gelu tanh", [](const std::vector<Tensor>& in) { return gelu(in[0], "tanh"); }, -3, 3},
      {"clamp", [](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, 0.6); }, 0, 0},
      {"clamp min", [](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, {}); }, 0, 0},
      {"clamp max", [](const std::vector<Tensor>& in) { return clamp(in[0], {}, 0.6); }, 0, 0},
      {"cast", [](const std::vector<Tensor>& in) { return cast(in[0], kFloat64); }, -1, 1},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    Tensor x = c.lo == c.hi ? signed_leaf({3, 4}, ++seed) : leaf({3, 4}, ++seed, c.lo, c.hi);
    check_gradcheck(c.f, {x});
    check_gradcheck(transposed(c.f), {x});
    Tensor s = c.lo == c.hi ? signed_leaf({}, ++seed) : leaf({}, ++seed, c.lo, c.hi);
    check_gradcheck(c.f, {s});  // 0-d
    Tensor y = c.f({x});
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(!y.is_leaf());
  }
}

TEST_CASE("unary gradients by hand: masks at the kinks, clamp bounds, sign") {
  Tensor x = leaf_of({-1.5, -0.5, 0.0, 0.5, 2.0}, {5});
  relu(x).backward(ones({5}, kFloat64));
  check_close(x.grad(), std::vector<double>{0, 0, 0, 1, 1});  // relu'(0) = 0 (PyTorch)
  Tensor y = leaf_of({-1.5, -0.5, 0.0, 0.5, 2.0}, {5});
  abs(y).backward(ones({5}, kFloat64));
  check_close(y.grad(), std::vector<double>{-1, -1, 0, 1, 1});
  Tensor z = leaf_of({-1.5, -0.5, 0.0, 0.5, 2.0}, {5});
  clamp(z, -0.5, 0.5).backward(ones({5}, kFloat64));  // passes where min <= x <= max
  check_close(z.grad(), std::vector<double>{0, 1, 1, 1, 0});
  Tensor w = leaf_of({-1.5, 0.0, 2.0}, {3});
  sign(w).backward(ones({3}, kFloat64));
  check_close(w.grad(), std::vector<double>{0, 0, 0});
  Tensor e = leaf_of({0.0, 1.0}, {2});
  Tensor ye = exp(e);
  CHECK(ye.grad_fn()->name() == "ExpBackward");
  ye.backward(from_f64({1, 2}, {2}, kFloat64));
  check_close(e.grad(), std::vector<double>{1, 2 * std::exp(1.0)});
  Tensor s = leaf_of({3.0}, {1});
  square(s).backward(ones({1}, kFloat64));
  check_close(s.grad(), std::vector<double>{6});
}

TEST_CASE("cast: the gradient is cast back to the input dtype") {
  Tensor x = from_f64({1, 2, 3}, {3}, kFloat32);
  x.requires_grad_();
  Tensor y = cast(x, kFloat64);
  CHECK(y.grad_fn()->name() == "CastBackward");
  y.backward(from_f64({0.5, 1, 2}, {3}, kFloat64));
  CHECK(x.grad().dtype() == kFloat32);
  check_close(x.grad(), std::vector<double>{0.5, 1, 2});
  Tensor h = from_f64({1, 2}, {2}, kFloat64);
  h.requires_grad_();
  Tensor hh = cast(h, kFloat16);
  CHECK(hh.dtype() == kFloat16);
  hh.backward(from_f64({1, 3}, {2}, kFloat16));
  CHECK(h.grad().dtype() == kFloat64);
  check_close(h.grad(), std::vector<double>{1, 3});
  CHECK(cast(h, kInt64).grad_fn() == nullptr);  // integer outputs carry no history
  CHECK(!cast(h, kBool).requires_grad());
}

TEST_CASE("binary ops pass gradcheck with broadcasting, 0-d and strided operands") {
  struct Case {
    const char* name;
    Fn f;
    double alo, ahi, blo, bhi;
  };
  auto bin = [](Tensor (*op)(const Tensor&, const Tensor&)) {
    return Fn([op](const std::vector<Tensor>& in) { return op(in[0], in[1]); });
  };
  const std::vector<Case> cases = {
      {"add", [](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, -1, 1, -1, 1},
      {"add alpha", [](const std::vector<Tensor>& in) { return add(in[0], in[1], 2.5); }, -1, 1, -1,
       1},
      {"sub", [](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }, -1, 1, -1, 1},
      {"sub alpha", [](const std::vector<Tensor>& in) { return sub(in[0], in[1], -0.5); }, -1, 1,
       -1, 1},
      {"mul", bin(mul), -1, 1, -1, 1},
      {"div", bin(div), -1, 1, 0.5, 2},
      {"pow", [](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, 0.5, 2, -1.5, 2},
      {"maximum", bin(maximum), -1, 1, -1, 1},
      {"minimum", bin(minimum), -1, 1, -1, 1},
      {"operators", [](const std::vector<Tensor>& in) { return (in[0] + in[1]) * in[0] - in[1]; },
       -1, 1, -1, 1},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 1}, {1, 4}}, {{2, 3}, {}}, {{}, {2, 3}}, {{2, 3}, {3}}, {{}, {}}};
  uint64_t seed = 200;
  for (const Case& c : cases) {
    for (const auto& [sa, sb] : shapes) {
      const std::string name = c.name, shapes = shape_str(sa) + " x " + shape_str(sb);
      CAPTURE(name);
      CAPTURE(shapes);
      Tensor a = leaf(sa, ++seed, c.alo, c.ahi), b = leaf(sb, ++seed, c.blo, c.bhi);
      check_gradcheck(c.f, {a, b});
      // only one operand requires grad
      Tensor b_const = b.detach();
      check_gradcheck([&](const std::vector<Tensor>& in) { return c.f({in[0], b_const}); }, {a});
    }
    const std::string name = c.name;
    CAPTURE(name);
    Tensor a = leaf({2, 3}, ++seed, c.alo, c.ahi), b = leaf({2, 3}, ++seed, c.blo, c.bhi);
    check_gradcheck(transposed(c.f), {a, b});
  }
}

TEST_CASE("scalar overloads and pow with a scalar exponent pass gradcheck") {
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"add", [](const std::vector<Tensor>& in) { return add(in[0], 1.5); }},
      {"sub", [](const std::vector<Tensor>& in) { return sub(in[0], 2); }},
      {"mul", [](const std::vector<Tensor>& in) { return mul(in[0], -3.0); }},
      {"div", [](const std::vector<Tensor>& in) { return div(in[0], 4.0); }},
      {"rsub", [](const std::vector<Tensor>& in) { return 2.0 - in[0]; }},
      {"rdiv", [](const std::vector<Tensor>& in) { return 1.0 / in[0]; }},
      {"maximum", [](const std::vector<Tensor>& in) { return maximum(in[0], 0.1); }},
      {"minimum", [](const std::vector<Tensor>& in) { return minimum(in[0], 0.1); }},
      {"pow 2.5", [](const std::vector<Tensor>& in) { return pow(abs(in[0]), 2.5); }},
      {"pow 3", [](const std::vector<Tensor>& in) { return pow(in[0], 3); }},
      {"pow -2", [](const std::vector<Tensor>& in) { return pow(in[0], -2.0); }},
      {"where", [](const std::vector<Tensor>& in) { return where(gt(in[0], 0), in[0], 0.5); }},
  };
  uint64_t seed = 300;
  for (const auto& [op, f] : cases) {
    const std::string name = op;
    CAPTURE(name);
    check_gradcheck(f, {signed_leaf({2, 3}, ++seed)});
  }
}

TEST_CASE("pow gradients at zero base and zero exponent are masked like PyTorch") {
  Tensor a = leaf_of({0.0, 0.0, 2.0}, {3}), b = leaf_of({2.0, 0.0, 0.0}, {3});
  pow(a, b).backward(ones({3}, kFloat64));
  // da = b a^(b-1) (0 where b == 0); db = a^b log(a) (0 where a == 0 and b >= 0)
  check_close(a.grad(), std::vector<double>{0, 0, 0});
  check_close(b.grad(), std::vector<double>{0, 0, std::log(2.0)});
  Tensor x = leaf_of({0.0, 3.0}, {2});
  pow(x, 0).backward(ones({2}, kFloat64));
  check_close(x.grad(), std::vector<double>{0, 0});
}

TEST_CASE("maximum/minimum send the gradient to the selected input and split ties") {
  Tensor a = leaf_of({1, 2, 3}, {3}), b = leaf_of({1, 1, 4}, {3});
  maximum(a, b).backward(from_f64({2, 2, 2}, {3}, kFloat64));
  check_close(a.grad(), std::vector<double>{1, 2, 0});
  check_close(b.grad(), std::vector<double>{1, 0, 2});
  Tensor c = leaf_of({1, 2, 3}, {3}), d = leaf_of({1, 1, 4}, {3});
  minimum(c, d).backward(from_f64({2, 2, 2}, {3}, kFloat64));
  check_close(c.grad(), std::vector<double>{1, 0, 2});
  check_close(d.grad(), std::vector<double>{1, 2, 0});
  // broadcast [3] vs 0-d: the 0-d operand collects the sum of its shares
  Tensor e = leaf_of({0, 1, 2}, {3}), s = leaf_of({1}, {});
  maximum(e, s).backward(ones({3}, kFloat64));
  check_close(e.grad(), std::vector<double>{0, 0.5, 1});
  check_close(s.grad(), std::vector<double>{1.5});
}

TEST_CASE("where routes the gradient by the mask (broadcast cond, a and b)") {
  Tensor cond = from_f64({1, 0, 1}, {3, 1}, kBool);
  Tensor a = leaf({1, 4}, 400), b = leaf({}, 401);
  check_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
  Tensor y = where(cond, a, b);
  CHECK(y.grad_fn()->name() == "WhereBackward");
  y.backward(ones({3, 4}, kFloat64));
  check_close(a.grad(), std::vector<double>{2, 2, 2, 2});
  check_close(b.grad(), std::vector<double>{4});
}

TEST_CASE("add/sub alpha, mixed dtypes and broadcasting: hand-worked gradients") {
  Tensor a = leaf_of({1, 2, 3}, {3, 1}), b = leaf_of({1, 2, 3, 4}, {1, 4});
  add(a, b, 2.0).backward(ones({3, 4}, kFloat64));
  check_close(a.grad(), std::vector<double>{4, 4, 4});
  check_close(b.grad(), std::vector<double>{6, 6, 6, 6});
  Tensor c = leaf_of({1, 2}, {2}), d = leaf_of({5}, {});
  sub(c, d, 3).backward(ones({2}, kFloat64));
  check_close(c.grad(), std::vector<double>{1, 1});
  check_close(d.grad(), std::vector<double>{-6});
  // f32 * f64 -> f64 output; each gradient arrives in its input's dtype
  Tensor f = from_f64({1, 2}, {2}, kFloat32), g = leaf_of({3, 4}, {2});
  f.requires_grad_();
  Tensor y = mul(f, g);
  CHECK(y.dtype() == kFloat64);
  y.backward(ones({2}, kFloat64));
  CHECK(f.grad().dtype() == kFloat32);
  check_close(f.grad(), std::vector<double>{3, 4});
  check_close(g.grad(), std::vector<double>{1, 2});
  // a tensor used twice accumulates both contributions: d(x*x)/dx = 2x
  Tensor x = leaf_of({1.5, -2}, {2});
  mul(x, x).backward(ones({2}, kFloat64));
  check_close(x.grad(), std::vector<double>{3, -4});
  // f16 leaves: backward runs in f16
  Tensor h = from_f64({1, 2}, {2}, kFloat16);
  h.requires_grad_();
  div(h, 2).backward(ones({2}, kFloat16));
  CHECK(h.grad().dtype() == kFloat16);
  check_close(h.grad(), std::vector<double>{0.5, 0.5});
}

TEST_CASE("no history under NoGradGuard, for constant inputs and for bool outputs") {
  Tensor x = leaf({2, 3}, 500), y = leaf({2, 3}, 501);
  {
    NoGradGuard guard;
    CHECK(exp(x).grad_fn() == nullptr);
    CHECK(!mul(x, y).requires_grad());
    CHECK(add(x, y, 2).grad_fn() == nullptr);
    CHECK(where(gt(x, 0), x, y).grad_fn() == nullptr);
    CHECK(gelu(x, "tanh").grad_fn() == nullptr);
    CHECK(cast(x, kFloat32).grad_fn() == nullptr);
  }
  Tensor c = random_tensor({2, 3}, kFloat64, 502);
  CHECK(exp(c).grad_fn() == nullptr);
  CHECK(mul(c, c).grad_fn() == nullptr);
  CHECK(gt(x, y).grad_fn() == nullptr);
  CHECK(!eq(x, y).requires_grad());
  CHECK(mul(c, x).grad_fn()->name() == "MulBackward");
  CHECK(add(x, 1).grad_fn()->name() == "AddBackward");
  CHECK(sub(x, y, 2).grad_fn()->name() == "AddBackward");
  CHECK(pow(x, 2).grad_fn()->name() == "PowBackward");
}

TEST_CASE("in-place ops reject tensors that take part in autograd") {
  Tensor x = leaf({2, 3}, 600), c = random_tensor({2, 3}, kFloat64, 601);
  const char* leaf_msg = "a leaf tensor that requires grad is being used in an in-place operation";
  CHECK_THROWS_WITH_AS(add_(x, c), doctest::Contains(leaf_msg), Error);
  CHECK_THROWS_WITH_AS(sub_(x, c, 2), doctest::Contains("sub_"), Error);
  CHECK_THROWS_WITH_AS(mul_(x, 2.0), doctest::Contains(leaf_msg), Error);
  CHECK_THROWS_WITH_AS(div_(x, c), doctest::Contains(leaf_msg), Error);
  CHECK_THROWS_WITH_AS(x += c, doctest::Contains("add_"), Error);
  CHECK_THROWS_WITH_AS(clamp_(x, 0, 1), doctest::Contains(leaf_msg), Error);
  Tensor y = exp(x);
  const char* hist_msg = "in-place operations on tensors with autograd history are not supported";
  CHECK_THROWS_WITH_AS(mul_(y, c), doctest::Contains(hist_msg), Error);
  CHECK_THROWS_WITH_AS(clamp_(y, 0, 1), doctest::Contains(hist_msg), Error);
  CHECK_THROWS_WITH_AS(add_(c, x), doctest::Contains("operand that requires grad"), Error);
  CHECK(x.version() == 0);
  {
    NoGradGuard guard;  // optimizers update leaves in place
    std::vector<double> before = to_f64(x), cv = to_f64(c);
    add_(x, c, -0.5);
    clamp_(x, -0.25, 0.25);
    std::vector<double> after = to_f64(x);
    for (size_t i = 0; i < before.size(); ++i)
      CHECK(after[i] == doctest::Approx(std::clamp(before[i] - 0.5 * cv[i], -0.25, 0.25)));
    mul_(x, 2.0);
  }
  CHECK(x.version() > 0);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
}
