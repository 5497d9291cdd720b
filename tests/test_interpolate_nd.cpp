// F::interpolate on 3-D [N,C,L] (nearest, nearest-exact, linear, area) and 5-D [N,C,D,H,W]
// (nearest, nearest-exact, trilinear, area) inputs against PyTorch 1.13
// (tools/golden/interpolate_nd.py -> tests/data/interpolate_nd.json; f32 values as 9 digits,
// read back as f32): outputs and input gradients in f64 and f32, nn::Upsample with
// InterpolateOptions, gradcheck, and torch's rank errors.
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "golden.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

namespace {

nn::InterpolateOptions options_of(const json& c) {
  nn::InterpolateOptions o;
  o.mode = c["mode"].get<std::string>();
  if (!c["align_corners"].is_null()) o.align_corners = c["align_corners"].get<bool>();
  if (!c["size"].is_null()) o.size = c["size"].get<std::vector<int64_t>>();
  if (!c["scale"].is_null()) o.scale_factor = c["scale"].get<std::vector<double>>();
  return o;
}

}  // namespace

TEST_CASE("interpolate matches PyTorch on 3-D and 5-D inputs (linear, trilinear, area, nearest)") {
  int n = 0, n3 = 0, n5 = 0;
  for (const json& c : golden("interpolate_nd.json")["interpolate"]) {
    const nn::InterpolateOptions o = options_of(c);
    const DType dt = c["dtype"].get<std::string>() == "f64" ? kFloat64 : kFloat32;
    Tensor x = golden_tensor(c["x"], dt);
    INFO(o.mode, " align_corners ", o.align_corners.value_or(false), " x ", x.shape_str(), " ",
         dtype_name(dt), " size ", c["size"].dump(), " scale ", c["scale"].dump());
    x.requires_grad_();
    Tensor out = F::interpolate(x, o);
    const bool exact = o.mode == "nearest" || o.mode == "nearest-exact";  // the same elements
    const double tol = exact ? 0 : dt == kFloat64 ? 1e-13 : 3e-6;
    REQUIRE(out.shape() == c["out"]["shape"].get<Shape>());
    check_close(out, golden_tensor(c["out"], dt), tol, tol);
    out.backward(golden_tensor(c["grad_out"], dt));
    REQUIRE(x.grad().defined());
    const double gtol = dt == kFloat64 ? 1e-13 : 3e-6;
    check_close(x.grad(), golden_tensor(c["grad_x"], dt), gtol, gtol);
    nn::Upsample up(o);
    NoGradGuard no_grad;
    check_close(up(golden_tensor(c["x"], dt)), golden_tensor(c["out"], dt), tol, tol);
    ++n;
    (x.dim() == 3 ? n3 : n5) += 1;
  }
  CHECK(n == 100);
  CHECK(n3 == 60);
  CHECK(n5 == 40);
}

TEST_CASE("interpolate 3-D/5-D: gradcheck, Upsample printing and torch's rank rules") {
  Tensor x3 = random_tensor({1, 2, 5}, kFloat64, 7),
         x5 = random_tensor({1, 1, 2, 3, 3}, kFloat64, 8);
  x3.requires_grad_();
  x5.requires_grad_();
  for (bool ac : {false, true}) {
    GRADCHECK(
        [ac](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], {.size = {8}, .mode = "linear", .align_corners = ac});
        },
        {x3});
    GRADCHECK(
        [ac](const std::vector<Tensor>& in) {
          return F::interpolate(in[0],
                                {.size = {3, 4, 2}, .mode = "trilinear", .align_corners = ac});
        },
        {x5});
  }
  for (const char* mode : {"area", "nearest-exact"}) {
    GRADCHECK(
        [mode](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], {.size = {3}, .mode = mode});
        },
        {x3});
    GRADCHECK(
        [mode](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], {.scale_factor = {1.5, 0.7, 1.2}, .mode = mode});
        },
        {x5});
  }
  CHECK(nn::Upsample({.scale_factor = {2.0}, .mode = "trilinear"}).repr() ==
        "Upsample(scale_factor=2.0, mode=trilinear)");
  CHECK(nn::Upsample({.size = {4, 6, 3}}).repr() == "Upsample(size=(4, 6, 3), mode=nearest)");
  // One size for every spatial dim, as size=5 in torch.
  CHECK(F::interpolate(x5.detach(), {.size = {4}}).shape() == Shape{1, 1, 4, 4, 4});

  Tensor y3 = random_tensor({1, 2, 5}), y4 = random_tensor({1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(F::interpolate(y4, {.size = {5}, .mode = "linear"}),
                       doctest::Contains("Got 4D input, but linear mode needs 3D input"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y3, {.size = {5}, .mode = "trilinear"}),
                       doctest::Contains("Got 3D input, but trilinear mode needs 5D input"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y3, {.size = {5, 6}}),
                       doctest::Contains("same number of spatial dimensions"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(random_tensor({4, 5}), {.size = {5}}),
                       doctest::Contains("Only 3D, 4D and 5D input"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y3, {.size = {5}, .mode = "area", .align_corners = true}),
                       doctest::Contains("align_corners option can only be set"), Error);
  CHECK_THROWS_WITH_AS(F::interpolate(y3, {.size = {0}}), doctest::Contains("output (W: 0)"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::Upsample({.size = {2}, .mode = "lanczos"}),
                       doctest::Contains("'lanczos' is not supported"), Error);
}
