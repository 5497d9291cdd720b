// Conv1d and ConvTranspose2d against PyTorch (tools/golden/golden_conv_extra.py: f64 forward
// and input/weight/bias gradients; module weight shapes, state_dict keys, repr), gradcheck of
// conv_transpose2d, torch's default init bounds, errors; a CPU/CUDA parity case (cuda_conv_extra).
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "cuda_parity.h"
#include "golden.h"

using namespace minidl;
using namespace testutil;

namespace {
Tensor field(const json& c, const char* name, const char* shape_key) {
  Tensor t = from_f64(c[name].get<std::vector<double>>(), c[shape_key].get<Shape>(), kFloat64);
  t.requires_grad_();
  return t;
}
Tensor bias_of(const json& c) {
  if (c["bias"].is_null()) return {};
  auto v = c["bias"].get<std::vector<double>>();
  Tensor b = from_f64(v, {int64_t(v.size())}, kFloat64);
  b.requires_grad_();
  return b;
}
Conv2dParams params_of(const json& c) {
  Conv2dParams p;
  for (int i = 0; i < 2; ++i) {
    p.stride[i] = c["stride"][i].get<int64_t>();
    p.padding[i] = c["padding"][i].get<int64_t>();
    p.dilation[i] = c["dilation"][i].get<int64_t>();
  }
  p.groups = c["groups"].get<int64_t>();
  return p;
}
std::array<int64_t, 2> output_padding_of(const json& c) {
  return {c["output_padding"][0].get<int64_t>(), c["output_padding"][1].get<int64_t>()};
}
// Forward values, then the gradients of sum(out * grad_out).
void check_case(const json& c, const Tensor& x, const Tensor& w, const Tensor& b,
                const Tensor& out) {
  CHECK(out.shape() == c["out_shape"].get<Shape>());
  check_close(out, c["out"].get<std::vector<double>>(), 1e-10, 1e-10);
  Tensor g = from_f64(c["grad_out"].get<std::vector<double>>(), out.shape(), kFloat64);
  sum(mul(out, g)).backward();
  check_close(x.grad(), c["grad_x"].get<std::vector<double>>(), 1e-10, 1e-10);
  check_close(w.grad(), c["grad_w"].get<std::vector<double>>(), 1e-10, 1e-10);
  if (b.defined()) check_close(b.grad(), c["grad_b"].get<std::vector<double>>(), 1e-10, 1e-10);
}
std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> k;
  for (const auto& [name, t] : m.state_dict()) k.push_back(name);
  return k;
}
void check_module(const nn::Module& m, const json& info, const Tensor& weight) {
  CHECK(m.repr() == info["repr"].get<std::string>());
  std::vector<std::string> want;
  for (const auto& [k, v] : info["state"].items()) want.push_back(k);
  CHECK(keys(m) == want);
  CHECK(weight.shape() == info["state"]["weight"].get<Shape>());
}
}  // namespace

TEST_CASE("conv_transpose2d matches PyTorch: forward and input/weight/bias gradients (f64)") {
  for (const json& c : golden("golden_conv_extra.json")["conv_transpose2d"]) {
    CAPTURE(c["name"].get<std::string>());
    Tensor x = field(c, "x", "x_shape"), w = field(c, "w", "w_shape"), b = bias_of(c);
    Tensor out = conv_transpose2d(x, w, b, params_of(c), output_padding_of(c));
    REQUIRE(out.grad_fn() != nullptr);
    CHECK(out.grad_fn()->name() == "ConvTranspose2dBackward");
    check_case(c, x, w, b, out);
  }
}

TEST_CASE("conv_transpose2d: gradcheck with stride, padding, output_padding, groups, dilation") {
  Conv2dParams p;
  p.stride[0] = 2, p.stride[1] = 3;
  p.padding[0] = 1;
  p.dilation[1] = 2;
  p.groups = 2;
  Tensor x = leaf({2, 4, 3, 3}, 1), w = leaf({4, 1, 3, 2}, 2), b = leaf({2}, 3);
  auto r = autograd::gradcheck(
      [&](const auto& v) {
        return conv_transpose2d(v[0], v[1], v[2], p, {1, 2});
      },
      {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
  // output_padding >= stride (allowed below dilation): x is zero-extended inside the op
  Conv2dParams q;
  q.padding[0] = q.padding[1] = 1;
  q.dilation[0] = q.dilation[1] = 2;
  Tensor x2 = leaf({1, 2, 3, 4}, 6), w2 = leaf({2, 3, 3, 2}, 7), b2 = leaf({3}, 8);
  auto r2 = autograd::gradcheck(
      [&](const auto& v) {
        return conv_transpose2d(v[0], v[1], v[2], q, {1, 1});
      },
      {x2, w2, b2});
  CHECK_MESSAGE(r2.ok, r2.message);
  Tensor xu = leaf({2, 3, 2}, 4), wu = leaf({2, 3, 2, 2}, 5);
  auto ru =
      autograd::gradcheck([&](const auto& v) { return conv_transpose2d(v[0], v[1]); }, {xu, wu});
  CHECK_MESSAGE(ru.ok, ru.message);
}

TEST_CASE("conv_transpose2d is the adjoint of conv2d") {
  // <conv2d(y, w), x> == <conv_transpose2d(x, w), y> for any x, y of matching shapes
  Conv2dParams p;
  p.stride[0] = p.stride[1] = 2;
  p.padding[0] = p.padding[1] = 1;
  Tensor w = random_tensor({3, 2, 3, 3}, kFloat64, 6);
  Tensor x = random_tensor({2, 3, 4, 4}, kFloat64, 7);
  Tensor y = random_tensor({2, 2, 8, 8}, kFloat64, 8);  // output_padding 1: 7 -> 8
  double a = sum(mul(conv2d(y, w, {}, p), x)).item<double>();
  double t = sum(mul(conv_transpose2d(x, w, {}, p, {1, 1}), y)).item<double>();
  CHECK(a == doctest::Approx(t).epsilon(1e-12));
}

TEST_CASE("conv1d matches PyTorch: forward and gradients (f64)") {
  for (const json& c : golden("golden_conv_extra.json")["conv1d"]) {
    CAPTURE(c["name"].get<std::string>());
    Tensor x = field(c, "x", "x_shape"), w = field(c, "w", "w_shape"), b = bias_of(c);
    Tensor out =
        nn::functional::conv1d(x, w, b, c["stride"].get<int64_t>(), c["padding"].get<int64_t>(),
                               c["dilation"].get<int64_t>(), c["groups"].get<int64_t>());
    check_case(c, x, w, b, out);
  }
}

TEST_CASE("ConvTranspose2d and Conv1d modules: shapes, state_dict keys, repr as PyTorch") {
  const json& m = golden("golden_conv_extra.json")["modules"];
  nn::ConvTranspose2d ct(2, 8, 3);
  check_module(ct, m["ct_default"], ct.weight);
  nn::ConvTranspose2d full(4, 6, {3, 2},
                           {.stride = 2,
                            .padding = 1,
                            .output_padding = 1,
                            .groups = 2,
                            .bias = false,
                            .dilation = {2, 1}});
  check_module(full, m["ct_full"], full.weight);
  nn::Conv1d c1(4, 8, 3);
  check_module(c1, m["c1_default"], c1.weight);
  nn::Conv1d c1f(4, 6, 5, {.stride = 2, .padding = 1, .dilation = 2, .groups = 2, .bias = false});
  check_module(c1f, m["c1_full"], c1f.weight);
  // the modules run their functional ops with their own arguments
  Tensor x = random_tensor({2, 4, 5, 5}, kFloat32, 9);
  Conv2dParams p;
  p.stride[0] = p.stride[1] = 2;
  p.padding[0] = p.padding[1] = 1;
  p.dilation[0] = 2;
  p.groups = 2;
  check_close(full(x), conv_transpose2d(x, full.weight, {}, p, {1, 1}), 0, 0);
  Tensor xs = random_tensor({2, 4, 12}, kFloat32, 10);
  check_close(c1f(xs), nn::functional::conv1d(xs, c1f.weight, {}, 2, 1, 2, 2), 0, 0);
  // L: (12 + 2 - 2*4 - 1) / 2 + 1 = 3; H: 4*2 - 2 + 2*2 + 1 + 1 = 12, W: 4*2 - 2 + 1 + 1 + 1 = 9
  CHECK(c1f(xs).shape() == Shape{2, 6, 3});
  CHECK(full(x).shape() == Shape{2, 6, 12, 9});
}

TEST_CASE("ConvTranspose2d default init: fan_in from the transposed weight [in, out/g, kh, kw]") {
  // torch: kaiming_uniform_(a=sqrt(5)) -> bound 1/sqrt(fan_in), fan_in = out/groups * kh * kw
  // (72 here; computing it from in_channels would give 18 and twice the bound)
  Generator gen(3);
  nn::ConvTranspose2d ct(2, 8, 3, {}, &gen);
  const double bound = 1.0 / std::sqrt(72.0);
  double wmax = 0, bmax = 0;
  for (double v : to_f64(ct.weight)) wmax = std::max(wmax, std::abs(v));
  for (double v : to_f64(ct.bias)) bmax = std::max(bmax, std::abs(v));
  CHECK(wmax <= bound);
  CHECK(wmax > 0.9 * bound);  // 144 draws reach near the bound
  CHECK(bmax <= bound);
  // same generator seed, same parameters
  Generator gen2(3);
  nn::ConvTranspose2d ct2(2, 8, 3, {}, &gen2);
  CHECK(bitwise_equal(ct.weight, ct2.weight));
  nn::Conv1d c1(3, 4, 5, {}, &gen);
  for (double v : to_f64(c1.weight)) CHECK(std::abs(v) <= 1.0 / std::sqrt(15.0));
}

TEST_CASE("ConvTranspose2d, Conv1d and conv_transpose2d errors") {
  CHECK_THROWS_WITH_AS(nn::ConvTranspose2d(3, 4, 3, {.groups = 2}), doctest::Contains("divisible"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::ConvTranspose2d(2, 2, 3, {.stride = 2, .output_padding = 2}),
                       doctest::Contains("output_padding"), Error);
  CHECK_THROWS_WITH_AS(nn::Conv1d(4, 3, 3, {.groups = 2}), doctest::Contains("divisible"), Error);
  nn::ConvTranspose2d ct(2, 3, 3);
  CHECK_THROWS_WITH_AS(ct(ones({1, 4, 5, 5})), doctest::Contains("[1, 4, 5, 5]"), Error);
  CHECK_THROWS_WITH_AS(conv_transpose2d(ones({1, 2, 3, 3}), ones({2, 3, 3})),
                       doctest::Contains("4-D weight"), Error);
  nn::Conv1d c1(2, 3, 3);
  CHECK_THROWS_WITH_AS(c1(ones({1, 2, 3, 3})), doctest::Contains("[1, 2, 3, 3]"), Error);
}

namespace {
// CPU/CUDA parity: conv_transpose2d forward and its three gradients, conv1d forward and input
// gradient; f32 and f64; two shape sets; variants: plain, stride/padding/output_padding,
// groups + dilation.
std::vector<parity::Case> conv_extra_cases() {
  using V = std::vector<Tensor>;
  parity::Case ct{"conv_transpose2d, conv1d",
                  {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"},
                  {{{2, 4, 5, 5}, {4, 3, 3, 3}, {6}}, {{1, 4, 3, 4}, {4, 1, 3, 2}, {2}}},
                  {kFloat32, kFloat64},
                  [](const V& in, Device, int v) {
                    Conv2dParams p;
                    std::array<int64_t, 2> op = {0, 0};
                    if (v == 1) p.stride[0] = p.stride[1] = 2, p.padding[0] = 1, op = {1, 0};
                    if (v == 2) p.dilation[0] = p.dilation[1] = 2, op = {1, 1};
                    p.groups = in[2].size(0) / in[1].size(1);
                    Tensor x = in[0].detach().requires_grad_(), w = in[1].detach().requires_grad_();
                    Tensor b = in[2].detach().requires_grad_();
                    Tensor y = conv_transpose2d(x, w, b, p, op);
                    sum(mul(y, y)).backward();
                    // conv1d: x1:[N,C,L] (a row of x), w1:[O,C,k] (a row of w, transposed)
                    Tensor x1 = in[0].select(-2, 0).detach().requires_grad_();
                    Tensor w1 = in[1].select(-2, 0).transpose(0, 1);
                    Tensor z = nn::functional::conv1d(x1, w1, {}, 1, 1, 1, 1);
                    sum(mul(z, z)).backward();
                    return V{y, x.grad(), w.grad(), b.grad(), z, x1.grad()};
                  }};
  ct.variants = 3;
  ct.layouts = false;
  ct.tol_scale = 3;
  return {ct};
}
}  // namespace

TEST_CASE("conv_extra parity table runs CPU against CPU") {
  parity::run_all(conv_extra_cases(), kCPU);
}

TEST_SUITE("cuda_conv_extra") {
  TEST_CASE("cuda parity: conv_transpose2d and conv1d, forward and gradients") {
    cuda::set_allow_tf32(false);
    parity::run_all(conv_extra_cases());
  }
}
