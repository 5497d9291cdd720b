// Identity, LeakyReLU, PReLU, Hardswish, GroupNorm, Upsample/interpolate and pad against
// PyTorch 1.13 (tests/data/golden_layers_extra.json, tools/golden/golden_layers_extra.py):
// f64 outputs and gradients, gradcheck, printing, errors; CUDA parity in `cuda_layers_extra`.
#include <doctest/doctest.h>

#include "cuda_parity.h"
#include "interpolate_golden.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {

const json& G() {
  return golden("golden_layers_extra.json");
}

Tensor gt64(const json& o) {
  return golden_tensor(o, kFloat64);
}

Tensor leaf_of(const json& o, DType dt = kFloat64) {
  Tensor t = golden_tensor(o, dt);
  t.requires_grad_();
  return t;
}

// Runs out = f(inputs), backward with grad_out; checks out and each input's grad.
void check_fwd_bwd(const Tensor& out, const json& c, const std::vector<Tensor>& ins,
                   const std::vector<std::string>& grad_keys, double rtol = 1e-12,
                   double atol = 1e-12) {
  check_close(out, gt64(c["out"]), rtol, atol);
  out.backward(golden_tensor(c["grad_out"], out.dtype()));
  for (size_t i = 0; i < ins.size(); ++i) {
    CAPTURE(grad_keys[i]);
    REQUIRE(ins[i].grad().defined());
    check_close(ins[i].grad(), gt64(c[grad_keys[i]]), rtol, atol);
  }
}

std::vector<int64_t> ints(const json& j) {
  return j.get<std::vector<int64_t>>();
}

}  // namespace

TEST_CASE("leaky_relu, prelu, hardswish match PyTorch in f64 (outputs and gradients)") {
  for (const json& c : G()["activations"]["leaky_relu"]) {
    Tensor x = leaf_of(c["x"]);
    const double slope = c["slope"].get<double>();
    CAPTURE(slope);
    check_fwd_bwd(F::leaky_relu(x, slope), c, {x}, {"grad_x"});
    nn::LeakyReLU m(slope);
    check_close(m(gt64(c["x"])), gt64(c["out"]), 1e-15, 0);
  }
  for (const json& c : G()["activations"]["prelu"]) {
    Tensor x = leaf_of(c["x"]), w = leaf_of(c["w"]);
    CAPTURE(x.shape_str());
    CAPTURE(w.shape_str());
    check_fwd_bwd(F::prelu(x, w), c, {x, w}, {"grad_x", "grad_w"});
    nn::PReLU m(w.numel());
    m.to(kFloat64);
    {
      NoGradGuard ng;
      m.weight.copy_(gt64(c["w"]));
    }
    Tensor x2 = leaf_of(c["x"]);
    Tensor out = m(x2);
    check_fwd_bwd(out, c, {x2, m.weight}, {"grad_x", "grad_w"});
  }
  for (const json& c : G()["activations"]["hardswish"]) {
    Tensor x = leaf_of(c["x"]);  // includes -3, 3, 0, -4, 4.5 exactly
    check_fwd_bwd(F::hardswish(x), c, {x}, {"grad_x"});
  }
}

TEST_CASE("activation layers: gradcheck, parameters, printing, errors") {
  Tensor x = leaf({3, 4, 2}, 11);
  GRADCHECK([](const std::vector<Tensor>& in) { return F::leaky_relu(in[0], 0.3); }, {x});
  GRADCHECK([](const std::vector<Tensor>& in) { return F::hardswish(in[0] * 4.0); }, {x});
  Tensor w = leaf({4}, 12, 0.1, 0.5);
  GRADCHECK([](const std::vector<Tensor>& in) { return F::prelu(in[0], in[1]); }, {x, w});

  nn::PReLU p(3, 0.1);
  auto named = p.named_parameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "weight");
  CHECK(p.weight.shape() == Shape{3});
  check_close(p.weight, {0.1, 0.1, 0.1});
  CHECK(p.state_dict().count("weight") == 1);
  CHECK(nn::PReLU().repr() == "PReLU(num_parameters=1)");
  CHECK(p.repr() == "PReLU(num_parameters=3)");
  CHECK(nn::LeakyReLU().repr() == "LeakyReLU(negative_slope=0.01)");
  CHECK(nn::LeakyReLU(0.2).repr() == "LeakyReLU(negative_slope=0.2)");
  CHECK(nn::Hardswish().repr() == "Hardswish()");
  CHECK(nn::Identity().repr() == "Identity()");
  Tensor y = random_tensor({2, 3});
  CHECK(bitwise_equal(nn::Identity()(y), y));
  auto clone = std::dynamic_pointer_cast<nn::PReLU>(p.clone());
  REQUIRE(clone);
  CHECK_FALSE(clone->weight.shares_storage(p.weight));

  CHECK_THROWS_WITH_AS(F::prelu(random_tensor({2, 6, 4}), ones({4})),
                       doctest::Contains("Found parameter numbers = 4 and channel size = 6"),
                       Error);
  CHECK_THROWS_WITH_AS(F::leaky_relu(ones({2}, kInt64)), doctest::Contains("floating"), Error);
}

TEST_CASE("group_norm matches PyTorch in f64 for 1, 2 and C groups, with and without affine") {
  for (const json& c : G()["group_norm"]) {
    const int64_t groups = c["groups"].get<int64_t>();
    const bool affine = c["affine"].get<bool>();
    Tensor x = leaf_of(c["x"]), w = leaf_of(c["w"]), b = leaf_of(c["b"]);
    CAPTURE(x.shape_str());
    CAPTURE(groups);
    CAPTURE(affine);
    const double eps = c["eps"].get<double>();
    if (affine)
      check_fwd_bwd(F::group_norm(x, groups, w, b, eps), c, {x, w, b},
                    {"grad_x", "grad_w", "grad_b"}, 1e-10, 1e-11);
    else
      check_fwd_bwd(F::group_norm(x, groups, {}, {}, eps), c, {x}, {"grad_x"}, 1e-10, 1e-11);
    // the module: parameters copied from the golden
    nn::GroupNorm m(groups, x.size(1), eps, affine);
    m.to(kFloat64);
    if (affine) {
      NoGradGuard ng;
      m.weight.copy_(gt64(c["w"]));
      m.bias.copy_(gt64(c["b"]));
    }
    check_close(m(gt64(c["x"])), gt64(c["out"]), 1e-10, 1e-11);
  }
}

TEST_CASE("GroupNorm: parameters, printing, gradcheck, errors") {
  nn::GroupNorm g(2, 6);
  std::vector<std::string> keys;
  for (auto& [k, v] : g.state_dict()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"bias", "weight"});
  check_close(g.weight, std::vector<double>(6, 1.0));
  check_close(g.bias, std::vector<double>(6, 0.0));
  CHECK(g.repr() == "GroupNorm(2, 6, eps=1e-05, affine=True)");
  CHECK(nn::GroupNorm(3, 6, 1e-3, false).repr() == "GroupNorm(3, 6, eps=0.001, affine=False)");
  CHECK(nn::GroupNorm(3, 6, 1e-3, false).parameters().empty());
  Tensor x = leaf({2, 4, 3}, 21), w = leaf({4}, 22), b = leaf({4}, 23);
  GRADCHECK([](const std::vector<Tensor>& in) { return F::group_norm(in[0], 2, in[1], in[2]); },
            {x, w, b});
  CHECK_THROWS_WITH_AS(F::group_norm(random_tensor({2, 6, 4}), 4),
                       doctest::Contains("Expected number of channels in input to be divisible by "
                                         "num_groups, but got input of shape [2, 6, 4] and "
                                         "num_groups=4"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::GroupNorm(4, 6), doctest::Contains("divisible by num_groups"), Error);
  CHECK_THROWS_WITH_AS(g(random_tensor({2, 4, 3})), doctest::Contains("[2, 4, 3]"), Error);
}

TEST_CASE("interpolate matches PyTorch: nearest/bilinear x align_corners, scales and sizes") {
  int n = 0;
  for (const json& c : G()["interpolate"]) {
    const InterpolateCase k(c);
    const auto& [mode, dt, ac, size, scale] = k;
    INFO(k.str());
    Tensor x = leaf_of(c["x"], dt);
    Tensor out = F::interpolate(x, size, scale, mode, ac);
    // f32: nearest picks the same elements (exact forward); sums to rounding otherwise
    const double tol = dt == kFloat64 ? 1e-13 : 2e-6;
    check_close(out, gt64(c["out"]), mode == "nearest" ? 0 : tol, mode == "nearest" ? 0 : tol);
    check_fwd_bwd(out, c, {x}, {"grad_x"}, tol, tol);
    nn::Upsample up(size, scale, mode, ac);
    check_close(up(golden_tensor(c["x"], dt)), gt64(c["out"]), tol, tol);
    ++n;
  }
  CHECK(n == 24);
}

TEST_CASE("Upsample/interpolate: printing, gradcheck, errors") {
  CHECK(nn::Upsample(std::nullopt, 2.0).repr() == "Upsample(scale_factor=2.0, mode=nearest)");
  CHECK(nn::Upsample(nn::Size2(5, 7), std::nullopt, "bilinear", true).repr() ==
        "Upsample(size=(5, 7), mode=bilinear)");
  CHECK(nn::Upsample(5).repr() == "Upsample(size=5, mode=nearest)");
  CHECK(nn::Upsample(std::nullopt, nn::Scale2(2, 3)).repr() ==
        "Upsample(scale_factor=(2.0, 3.0), mode=nearest)");
  Tensor x = leaf({1, 2, 3, 4}, 31);
  for (bool ac : {false, true})
    GRADCHECK(
        [ac](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], nn::Size2(5, 7), std::nullopt, "bilinear", ac);
        },
        {x});
  GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return F::interpolate(in[0], std::nullopt, nn::Scale2(1.7), "nearest");
      },
      {x});
  Tensor y = random_tensor({1, 1, 3, 4});
  CHECK_THROWS_WITH_AS(F::interpolate(y, nn::Size2(5, 7), nn::Scale2(2.0)),
                       doctest::Contains("only one of size or scale_factor"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y, std::nullopt),
                       doctest::Contains("either size or scale_factor"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y, nn::Size2(5), std::nullopt, "nearest", true),
                       doctest::Contains("align_corners option can only be set"), Error);
  CHECK_THROWS_WITH_AS(
      F::interpolate(random_tensor({1, 3, 4}), nn::Size2(5), std::nullopt, "bilinear"),
      doctest::Contains("needs 4D input"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y, nn::Size2(5), std::nullopt, "trilinear"),
                       doctest::Contains("Got 4D input, but trilinear mode needs 5D input"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y, nn::Size2(5), std::nullopt, "lanczos"),
                       doctest::Contains("mode 'lanczos' is not supported"), Error);
}

TEST_CASE("pad matches PyTorch: constant, reflect, replicate, circular, negative pads") {
  for (const json& c : G()["pad"]) {
    const std::vector<int64_t> p = ints(c["pad"]);
    const std::string mode = c["mode"].get<std::string>();
    std::optional<double> value;
    if (!c["value"].is_null()) value = c["value"].get<double>();
    Tensor x = leaf_of(c["x"]);
    INFO(mode, " pad ", shape_str(p), " on ", x.shape_str());
    check_fwd_bwd(F::pad(x, p, mode, value), c, {x}, {"grad_x"}, 1e-14, 1e-15);
  }
}

TEST_CASE("pad: gradcheck and PyTorch's errors") {
  Tensor x = leaf({2, 3, 4}, 41);
  for (const char* mode : {"constant", "reflect", "replicate", "circular"})
    GRADCHECK(
        [mode](const std::vector<Tensor>& in) {
          return F::pad(in[0], {2, -1, 1, 2}, mode);
        },
        {x});
  Tensor y = random_tensor({1, 1, 3, 3});
  CHECK_THROWS_WITH_AS(F::pad(y, {1}), doctest::Contains("divisible by 2"), Error);
  CHECK_THROWS_WITH_AS(F::pad(random_tensor({2, 3}), {1, 1, 1, 1, 1, 1}),
                       doctest::Contains("Padding length too large"), Error);
  CHECK_THROWS_WITH_AS(F::pad(y, {3, 3, 0, 0}, "reflect"),
                       doctest::Contains("Padding size should be less than the corresponding "
                                         "input dimension"),
                       Error);
  CHECK_THROWS_WITH_AS(F::pad(y, {1, 1}, "reflect"),
                       doctest::Contains("Only 2D, 3D, 4D, 5D padding with non-constant padding"),
                       Error);
  CHECK_THROWS_WITH_AS(F::pad(y, {1, 1, 1, 1}, "reflect", 1.0),
                       doctest::Contains("doesn't take in value argument"), Error);
  CHECK_THROWS_WITH_AS(F::pad(y, {1, 1, 1, 1}, "wrap"), doctest::Contains("circular"), Error);
  // circular wraps at most once around what the crop leaves: (4, 0) and (-1, 3) on a size-3 dim
  CHECK_THROWS_WITH_AS(F::pad(y, {4, 0, 0, 0}, "circular"),
                       doctest::Contains("wrapping around more than once"), Error);
  CHECK_THROWS_WITH_AS(F::pad(y, {-1, 3, 0, 0}, "circular"),
                       doctest::Contains("leaves 2 element(s)"), Error);
  // an input without the batch dim pads as its batched form (torch 2.x; 1.13 needs the batch)
  Tensor c = random_tensor({3, 4, 5}, kFloat64, 7);
  check_close(F::pad(c, {2, -1, 1, 3}, "circular"),
              F::pad(c.unsqueeze(0), {2, -1, 1, 3}, "circular").squeeze(0), 0, 0);
  // constant padding of an integer tensor keeps its dtype
  Tensor i = F::pad(ones({2, 2}, kInt64), {1, 0}, "constant", 7);
  CHECK(i.dtype() == kInt64);
  CHECK(to_f64(i) == std::vector<double>{7, 1, 1, 7, 1, 1});
}

// ---- CPU vs CUDA (the same composites on both devices): outputs and input gradients
namespace {

// f's output and the gradients of its first `used` inputs (all when used < 0).
std::vector<Tensor> with_grads(const std::vector<Tensor>& in, Device dev,
                               const std::function<Tensor(const std::vector<Tensor>&)>& f,
                               int used = -1) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < (used < 0 ? in.size() : size_t(used)); ++i) {
    const Tensor& t = in[i];
    Tensor l = t.to(dev).detach();  // keeps the layout (a view is a leaf once detached)
    if (l.is_floating_point()) l.requires_grad_();
    xs.push_back(l);
  }
  Tensor out = f(xs);
  Tensor g = parity::rnd(out.shape(), out.dtype(), 99, kCPU).to(dev);
  std::vector<Tensor> res{out};
  auto grads = autograd::grad({out}, xs, {g});
  res.insert(res.end(), grads.begin(), grads.end());
  return res;
}

std::vector<parity::Case> layers_extra_cases() {
  using parity::Case;
  const std::vector<DType> fl = {kFloat32, kFloat64};
  std::vector<Case> cs;
  cs.push_back(Case{"leaky_relu/hardswish/prelu",
                    {},
                    {{{2, 3, 4, 5}, {3}}},
                    fl,
                    [](const std::vector<Tensor>& in, Device dev, int v) {
                      return with_grads(
                          in, dev,
                          [v](const std::vector<Tensor>& x) {
                            if (v == 0) return F::leaky_relu(x[0], 0.2);
                            if (v == 1) return F::hardswish(x[0] * 2.0);
                            return F::prelu(x[0], x[1]);
                          },
                          v == 2 ? 2 : 1);
                    },
                    3});
  cs.push_back(Case{"group_norm",
                    {},
                    {{{2, 6, 3, 4}, {6}, {6}}},
                    fl,
                    [](const std::vector<Tensor>& in, Device dev, int v) {
                      return with_grads(in, dev, [v](const std::vector<Tensor>& x) {
                        return F::group_norm(x[0], v == 0 ? 1 : (v == 1 ? 3 : 6), x[1], x[2]);
                      });
                    },
                    3});
  cs.push_back(Case{"interpolate",
                    {},
                    {{{2, 3, 3, 4}}},
                    fl,
                    [](const std::vector<Tensor>& in, Device dev, int v) {
                      return with_grads(in, dev, [v](const std::vector<Tensor>& x) {
                        if (v == 0) return F::interpolate(x[0], std::nullopt, nn::Scale2(2.0));
                        if (v == 1) return F::interpolate(x[0], nn::Size2(5, 7));
                        return F::interpolate(x[0], nn::Size2(5, 7), std::nullopt, "bilinear",
                                              v == 3);
                      });
                    },
                    4});
  cs.push_back(Case{"pad",
                    {},
                    {{{2, 3, 4, 5}}},
                    fl,
                    [](const std::vector<Tensor>& in, Device dev, int v) {
                      static const char* modes[] = {"constant", "reflect", "replicate", "circular"};
                      return with_grads(in, dev, [v](const std::vector<Tensor>& x) {
                        return F::pad(x[0], {2, -1, 1, 3}, modes[v], v == 0 ? 0.5 : 0.0);
                      });
                    },
                    4});
  for (Case& c : cs) c.layouts = true;
  return cs;
}

}  // namespace

TEST_SUITE("cuda_layers_extra") {
  TEST_CASE("cuda parity: leaky_relu, prelu, hardswish, group_norm, interpolate, pad") {
    parity::run_all(layers_extra_cases(), kCUDA);
  }
}

TEST_CASE("layers_extra parity table runs CPU against CPU") {
  parity::run_all(layers_extra_cases(), kCPU);
}
