// F::interpolate's bicubic (align_corners false/true), nearest-exact and area modes against
// PyTorch 1.13 (tools/golden/interpolate_modes.py -> tests/data/interpolate_modes.json): outputs
// and input gradients for up- and down-sampling sizes and scales in f64 and f32, gradcheck,
// nn::Upsample with the new modes, and the align_corners rule.
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "interpolate_golden.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

TEST_CASE("interpolate matches PyTorch: bicubic, nearest-exact and area") {
  int n = 0;
  for (const json& c : golden("interpolate_modes.json")["interpolate"]) {
    const InterpolateCase k(c);
    const auto& [mode, dt, ac, size, scale] = k;
    INFO(k.str());
    Tensor x = golden_tensor(c["x"], dt);
    x.requires_grad_();
    Tensor out = F::interpolate(x, size, scale, mode, ac);
    // nearest-exact picks the same elements (exact); the weighted sums agree to rounding
    const double tol = mode == "nearest-exact" ? 0 : dt == kFloat64 ? 1e-13 : 3e-6;
    REQUIRE(out.shape() == c["out"]["shape"].get<Shape>());
    check_close(out, golden_tensor(c["out"], kFloat64), tol, tol);
    out.backward(golden_tensor(c["grad_out"], dt));
    REQUIRE(x.grad().defined());
    const double gtol = dt == kFloat64 ? 1e-13 : 3e-6;
    check_close(x.grad(), golden_tensor(c["grad_x"], kFloat64), gtol, gtol);
    nn::Upsample up(size, scale, mode, ac);
    NoGradGuard no_grad;
    check_close(up(golden_tensor(c["x"], dt)), golden_tensor(c["out"], kFloat64), tol, tol);
    ++n;
  }
  CHECK(n == 48);
}

TEST_CASE("interpolate bicubic, nearest-exact, area: gradcheck and the align_corners rule") {
  Tensor x = random_tensor({1, 2, 3, 4}, kFloat64, 5);
  x.requires_grad_();
  for (bool ac : {false, true})
    GRADCHECK(
        [ac](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], nn::Size2(5, 7), std::nullopt, "bicubic", ac);
        },
        {x});
  for (const char* mode : {"bicubic", "nearest-exact", "area"})
    GRADCHECK(
        [mode](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], std::nullopt, nn::Scale2(0.7, 1.6), mode);
        },
        {x});
  CHECK(nn::Upsample(std::nullopt, 2.0, "bicubic", true).repr() ==
        "Upsample(scale_factor=2.0, mode=bicubic)");
  Tensor y = random_tensor({1, 1, 3, 4});
  for (const char* mode : {"nearest-exact", "area"})
    CHECK_THROWS_WITH_AS(F::interpolate(y, nn::Size2(5), std::nullopt, mode, false),
                         doctest::Contains("align_corners option can only be set"), Error);
  CHECK_THROWS_WITH_AS(
      nn::Upsample(2, std::nullopt, "lanczos"),
      doctest::Contains("nearest | nearest-exact | linear | bilinear | bicubic | trilinear | area"),
      Error);
}
