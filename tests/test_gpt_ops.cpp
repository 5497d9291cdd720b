// GPT ops on the CPU: tril/triu, masked_fill, cumsum, div rounding modes / floor_divide and
// cross_entropy with class-probability targets against PyTorch 1.13 goldens
// (tests/data/golden_gpt_ops.json, tools/golden/gen_gpt_ops.py), gradchecks in f64, errors,
// and multinomial's frequencies, determinism and validation.
#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "golden.h"

using namespace minidl;
using testutil::check_close;
using testutil::golden_tensor;
using testutil::json;

namespace {

const json& cases() {
  return testutil::golden("golden_gpt_ops.json")["cases"];
}

Tensor gt64(const json& o) {
  return golden_tensor(o, kFloat64);
}

// gradients of sum(fn(inputs) * g) w.r.t. every input
std::vector<Tensor> grads_of(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                             std::vector<Tensor> inputs, const Tensor& g) {
  for (Tensor& t : inputs) t = t.clone().detach().requires_grad_();
  Tensor out = fn(inputs);
  out.backward(g);
  std::vector<Tensor> r;
  for (const Tensor& t : inputs) r.push_back(t.grad());
  return r;
}

void check_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                     const std::vector<Tensor>& inputs) {
  auto r = autograd::gradcheck(fn, inputs);
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace

TEST_CASE("tril and triu match torch on batched input, gradient masked the same way") {
  int n = 0;
  for (const json& c : cases()["tri"]) {
    const std::string op = c["op"];
    const int64_t diag = c["diagonal"];
    CAPTURE(op);
    CAPTURE(diag);
    auto fn = [&](const std::vector<Tensor>& in) {
      return op == "tril" ? tril(in[0], diag) : triu(in[0], diag);
    };
    Tensor x = gt64(c["x"]);
    check_close(fn({x}), gt64(c["out"]), 0, 0);
    check_close(fn({testutil::noncontiguous(x)}), gt64(c["out"]), 0, 0);
    check_close(grads_of(fn, {x}, gt64(c["g"]))[0], gt64(c["grad_x"]), 0, 0);
    ++n;
  }
  CHECK(n == 20);
  check_gradcheck([](const auto& in) { return tril(in[0], -1); }, {testutil::leaf({2, 3, 4}, 1)});
  check_gradcheck([](const auto& in) { return triu(in[0], 1); }, {testutil::leaf({3, 3}, 2)});
  // other dtypes keep their dtype; a transposed view is read through its strides
  Tensor i = arange(12, kInt32).view({3, 4});
  CHECK(tril(i).dtype() == kInt32);
  CHECK(tril(i).tolist<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0});
  CHECK(triu(i.t()).tolist<int64_t>() == std::vector<int64_t>{0, 4, 8, 0, 5, 9, 0, 0, 10, 0, 0, 0});
  CHECK(tril(ones({2, 2}, kBool)).tolist<int64_t>() == std::vector<int64_t>{1, 0, 1, 1});
  CHECK_THROWS_WITH_AS(tril(ones({3})), doctest::Contains("at least 2 dimensions"), Error);
}

TEST_CASE("masked_fill matches torch: broadcast mask, scalar and 0-d tensor values, gradients") {
  for (const json& c : cases()["masked_fill"]) {
    Tensor x = gt64(c["x"]), mask = golden_tensor(c["mask"], kBool), g = gt64(c["g"]);
    const double value = c["value"];
    CAPTURE(value);
    if (c.contains("tensor_value")) {
      Tensor v = scalar_tensor(value, kFloat64);
      auto gs =
          grads_of([&](const auto& in) { return masked_fill(in[0], mask, in[1]); }, {x, v}, g);
      check_close(masked_fill(x, mask, v), gt64(c["out"]), 0, 0);
      check_close(gs[0], gt64(c["grad_x"]), 0, 0);
      check_close(gs[1], gt64(c["grad_value"]), 1e-14, 1e-14);
      check_gradcheck([&](const auto& in) { return masked_fill(in[0], mask, in[1]); },
                      {testutil::leaf(x.shape(), 3), testutil::leaf({}, 4)});
    } else {
      auto fn = [&](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, value); };
      check_close(fn({x}), gt64(c["out"]), 0, 0);
      check_close(grads_of(fn, {x}, g)[0], gt64(c["grad_x"]), 0, 0);
      Tensor y = x.clone();
      masked_fill_(y, mask, value);
      check_close(y, gt64(c["out"]), 0, 0);
    }
  }
  // x's dtype is kept; -inf fill for attention masks
  Tensor xi = arange(4, kInt64);
  Tensor m = tensor(std::vector<uint8_t>{1, 0, 0, 1}).to(kBool);
  CHECK(masked_fill(xi, m, 7).tolist<int64_t>() == std::vector<int64_t>{7, 1, 2, 7});
  Tensor f = masked_fill(zeros({4}), m, -std::numeric_limits<double>::infinity());
  CHECK(f.dtype() == kFloat32);
  CHECK(std::isinf(f.at({0})));
  CHECK_THROWS_WITH_AS(masked_fill(zeros({4}), ones({4}), 1.0),
                       doctest::Contains("only supports boolean masks"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({2, 4}), ones({3, 4}, kBool), 1.0),
                       doctest::Contains("not broadcastable"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({4}), ones({2, 4}, kBool), 1.0),
                       doctest::Contains("does not broadcast"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({4}), m, ones({1})),
                       doctest::Contains("0-dimensional value tensor"), Error);
}

TEST_CASE("cumsum matches torch: float gradients, integer and bool inputs accumulate in int64") {
  const json& c = cases()["cumsum"];
  for (const json& f : c["float"]) {
    const int64_t dim = f["dim"];
    CAPTURE(dim);
    auto fn = [&](const std::vector<Tensor>& in) { return cumsum(in[0], dim); };
    Tensor x = gt64(f["x"]);
    check_close(fn({x}), gt64(f["out"]), 1e-14, 1e-14);
    check_close(fn({testutil::noncontiguous(x)}), gt64(f["out"]), 1e-14, 1e-14);
    check_close(fn({x.transpose(0, 2).contiguous().transpose(0, 2)}), gt64(f["out"]), 1e-14, 1e-14);
    check_close(grads_of(fn, {x}, gt64(f["g"]))[0], gt64(f["grad_x"]), 1e-14, 1e-14);
  }
  check_gradcheck([](const auto& in) { return cumsum(in[0], 1); }, {testutil::leaf({3, 5, 2}, 5)});
  Tensor xi = golden_tensor(c["int32"]["x"], kInt32);
  CHECK(c["int32"]["out_dtype"] == "torch.int64");
  CHECK(cumsum(xi, 1).dtype() == kInt64);
  check_close(cumsum(xi, 1), golden_tensor(c["int32"]["out_dim1"], kFloat64), 0, 0);
  check_close(cumsum(xi, 0), golden_tensor(c["int32"]["out_dim0"], kFloat64), 0, 0);
  Tensor xb = golden_tensor(c["bool"]["x"], kBool);
  CHECK(cumsum(xb, 0).dtype() == kInt64);
  check_close(cumsum(xb, 0), golden_tensor(c["bool"]["out"], kFloat64), 0, 0);
  // dtype argument, f16 accumulating in float, 0-d input, empty dims
  CHECK(cumsum(xi, 1, kFloat64).dtype() == kFloat64);
  Tensor h = full({300}, 0.1, kFloat16);
  CHECK(cumsum(h, 0).dtype() == kFloat16);
  CHECK(cumsum(h, 0).at({299}) == doctest::Approx(30.0).epsilon(2e-3));
  CHECK(cumsum(scalar_tensor(2.5, kFloat32), 0).dim() == 0);
  CHECK(cumsum(zeros({0, 3}), 0).shape() == Shape{0, 3});
  CHECK_THROWS_WITH_AS(cumsum(zeros({2, 3}), 2), doctest::Contains("cumsum"), Error);
}

TEST_CASE("div with rounding_mode and floor_divide match torch, gradient zero") {
  const json& c = cases()["div"];
  Tensor a = gt64(c["a"]), b = gt64(c["b"]);
  Tensor ai = golden_tensor(c["ai"], kInt64), bi = golden_tensor(c["bi"], kInt64);
  for (std::string mode : {"trunc", "floor"}) {
    CAPTURE(mode);
    Tensor q = div(a, b, mode);
    check_close(q, gt64(c["float_" + mode]), 0, 0);
    Tensor qi = div(ai, bi, mode);
    CHECK(qi.dtype() == kInt64);
    CHECK(c["int_" + mode + "_dtype"] == "torch.int64");
    check_close(qi, gt64(c["int_" + mode]), 0, 0);
    check_close(div(ai, -3, mode), gt64(c["int_scalar_" + mode]), 0, 0);
    check_close(div(a, 0.7, mode), gt64(c["float_scalar_" + mode]), 0, 0);
    // int32 and f32 give the same values
    check_close(div(ai.to(kInt32), bi.to(kInt32), mode), gt64(c["int_" + mode]), 0, 0);
  }
  // the sign of zero: -0.0 // 3 is -0.0 (Python)
  CHECK(std::signbit(div(a, b, "floor").at({10})));
  check_close(floor_divide(a, b), gt64(c["floor_divide"]), 0, 0);
  check_close(floor_divide(ai, 4), std::vector<double>{1, -2, 1, -2, 0, 2, -3, 0, -1, 25}, 0, 0);
  auto gs = grads_of([](const auto& in) { return div(in[0], in[1], "floor"); }, {a, b},
                     ones({12}, kFloat64));
  check_close(gs[0], gt64(c["grad_a_floor"]), 0, 0);
  check_close(gs[1], gt64(c["grad_b_floor"]), 0, 0);
  // true division unchanged; float division by zero is IEEE; integer division by zero throws
  check_close(div(ai, bi, std::nullopt), div(ai, bi), 0, 0);
  CHECK(std::isinf(div(tensor({1.0}), tensor({0.0}), "floor").at({0})));
  CHECK(std::isnan(div(tensor({0.0}), tensor({0.0}), "trunc").at({0})));
  CHECK_THROWS_WITH_AS(div(ai, zeros({10}, kInt64), "floor"),
                       doctest::Contains("ZeroDivisionError"), Error);
  CHECK_THROWS_WITH_AS(div(a, b, "round"), doctest::Contains("found 'round'"), Error);
  CHECK_THROWS_WITH_AS(div(ones({2}, kBool), ones({2}, kBool), "floor"), doctest::Contains("bool"),
                       Error);
}

TEST_CASE("cross_entropy with class-probability targets matches torch, gradients to both") {
  int n = 0;
  for (const json& c : cases()["cross_entropy_prob"]) {
    const std::string red = c["reduction"];
    const double ls = c["label_smoothing"];
    CAPTURE(red);
    CAPTURE(ls);
    const Reduction r = red == "none"  ? Reduction::none
                        : red == "sum" ? Reduction::sum
                                       : Reduction::mean;
    auto fn = [&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0], in[1], r, -100, ls);
    };
    Tensor logits = gt64(c["logits"]), target = gt64(c["target"]);
    CAPTURE(logits.shape_str());
    check_close(fn({logits, target}), gt64(c["out"]), 1e-12, 1e-12);
    auto gs = grads_of(fn, {logits, target}, gt64(c["g"]));
    check_close(gs[0], gt64(c["grad_logits"]), 1e-12, 1e-12);
    check_close(gs[1], gt64(c["grad_target"]), 1e-12, 1e-12);
    ++n;
  }
  CHECK(n == 18);
  check_gradcheck(
      [](const auto& in) {
        return cross_entropy(in[0], softmax(in[1], 1), Reduction::mean, -100, 0.1);
      },
      {testutil::leaf({3, 4, 2}, 6), testutil::leaf({3, 4, 2}, 7)});
  // f32 works; integer targets still take the index path (unchanged); errors
  Tensor lo = testutil::random_tensor({4, 5}, kFloat32, 8);
  Tensor t = softmax(testutil::random_tensor({4, 5}, kFloat32, 9), 1);
  CHECK(cross_entropy(lo, t).dtype() == kFloat32);
  Tensor idx = tensor(std::vector<int64_t>{0, 4, 2, 1});
  CHECK(cross_entropy(lo, one_hot(idx, 5).to(kFloat32)).item<double>() ==
        doctest::Approx(cross_entropy(lo, idx).item<double>()).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(cross_entropy(lo, zeros({4, 6})),
                       doctest::Contains("class probabilities only with the logits' shape [4, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(lo, t, Reduction::mean, 0),
                       doctest::Contains("ignore_index is not supported"), Error);
}

TEST_CASE("multinomial: frequencies, determinism per seed, without replacement, errors") {
  // with replacement: counts of 40000 draws over weights 1:2:3:0:4 (unnormalised)
  Tensor w = tensor({1.0, 2.0, 3.0, 0.0, 4.0}, kFloat32);
  Generator gen(1234);
  const int64_t n = 40000;
  Tensor s = multinomial(w, n, true, &gen);
  CHECK(s.dtype() == kInt64);
  CHECK(s.shape() == Shape{n});
  std::vector<int64_t> v = s.tolist<int64_t>(), counts(5, 0);
  for (int64_t k : v) counts[size_t(k)]++;
  CHECK(counts[3] == 0);
  double chi2 = 0;
  const double p[5] = {0.1, 0.2, 0.3, 0.0, 0.4};
  for (int k = 0; k < 5; ++k)
    if (p[k] > 0) chi2 += std::pow(double(counts[size_t(k)]) - n * p[k], 2) / (n * p[k]);
  CHECK(chi2 < 16.3);  // 3 degrees of freedom, p = 0.001
  // determinism: the same seed gives the same draws; the generator advances
  Generator g1(7), g2(7);
  Tensor probs = softmax(testutil::random_tensor({3, 6}, kFloat64, 10), 1);
  Tensor d1 = multinomial(probs, 4, true, &g1), d2 = multinomial(probs, 4, true, &g2);
  CHECK(equal(d1, d2));
  CHECK(d1.shape() == Shape{3, 4});
  CHECK_FALSE(equal(multinomial(probs, 50, true, &g1), multinomial(probs, 50, true, &g1)));
  // without replacement: distinct indices, never a zero weight, all categories when S == C
  Tensor wz = tensor({0.5, 0.0, 2.0, 1.0, 0.0, 3.0}, kFloat64).view({1, 6}).expand({64, 6});
  Tensor nr = multinomial(wz, 4, false, &g1);
  for (int64_t r = 0; r < 64; ++r) {
    std::vector<int64_t> row = nr[r].tolist<int64_t>();
    std::sort(row.begin(), row.end());
    CHECK(row == std::vector<int64_t>{0, 2, 3, 5});
  }
  // first draw without replacement follows the weights (chi-square on 20000 rows)
  Tensor first =
      multinomial(tensor({1.0, 3.0}, kFloat64).view({1, 2}).expand({20000, 2}), 2, false, &g1)
          .select(1, 0);
  const double ones_ = sum(first).item<double>();
  CHECK(std::pow(ones_ - 15000, 2) / 15000 + std::pow(5000 - (20000 - ones_), 2) / 5000 < 10.8);
  // errors
  CHECK_THROWS_WITH_AS(multinomial(tensor({1.0, -1.0}), 1), doctest::Contains("element < 0"),
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1.0, std::nan("")}), 1), doctest::Contains("nan"),
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1.0, INFINITY}), 1), doctest::Contains("inf"), Error);
  CHECK_THROWS_WITH_AS(multinomial(zeros({2, 3}), 1), doctest::Contains("sum of probabilities"),
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1.0, 1.0}), 3), doctest::Contains("n_sample > "), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1.0, 0.0, 0.0}), 2),
                       doctest::Contains("not enough non-negative category"), Error);
  CHECK_THROWS_WITH_AS(multinomial(arange(3), 1), doctest::Contains("floating-point"), Error);
  CHECK_THROWS_WITH_AS(multinomial(zeros({1, 2, 3}), 1), doctest::Contains("1 or 2 dim"), Error);
  CHECK(multinomial(tensor({1.0, 1.0}), 5, true).numel() == 5);  // replacement allows S > C
}
