// The element-wise losses against PyTorch (tools/golden/gen_losses_elementwise.py: values and
// input gradients for each reduction), the broadcast warning PyTorch gives (once per call site,
// or per loss Module), binary_cross_entropy's refusals, and the loss Modules.
#include <doctest/doctest.h>

#include "golden.h"
#include "nn/loss.h"
#include "tensor/warning.h"

using namespace minidl;
using namespace testutil;

namespace {
Reduction reduction_of(const json& c) {
  return nn::parse_reduction(c["reduction"].get<std::string>());
}

Tensor run_case(const json& c, const Tensor& x, const Tensor& y) {
  const std::string op = c["op"].get<std::string>();
  const Reduction r = reduction_of(c);
  if (op == "mse_loss") return F::mse_loss(x, y, r);
  if (op == "l1_loss") return F::l1_loss(x, y, r);
  if (op == "smooth_l1_loss") return F::smooth_l1_loss(x, y, r, c["beta"].get<double>());
  if (op == "huber_loss") return F::huber_loss(x, y, r, c["delta"].get<double>());
  REQUIRE(op == "binary_cross_entropy");
  Tensor w = c.contains("weight") ? golden_tensor(c["weight"], kFloat64) : Tensor();
  return F::binary_cross_entropy(x, y, w, r);
}
}  // namespace

TEST_CASE("element-wise losses match PyTorch golden values and gradients (f64)") {
  WarningCapture quiet;  // the broadcasting cases warn; that is tested below
  for (const json& c : golden("golden_losses_elementwise.json")) {
    CAPTURE(c["op"].get<std::string>());
    CAPTURE(c["reduction"].get<std::string>());
    Tensor x = golden_tensor(c["x"], kFloat64);
    x.requires_grad_();
    Tensor y = golden_tensor(c["y"], kFloat64);
    Tensor out = run_case(c, x, y);
    check_close(out, golden_values(c["out"]), 1e-12, 1e-13);
    sum(out * golden_tensor(c["gout"], kFloat64)).backward();
    check_close(x.grad(), golden_values(c["grad_x"]), 1e-12, 1e-13);
  }
}

TEST_CASE("regression losses warn when the target broadcasts, once per call site") {
  Tensor input = ones({4, 1}), target = zeros({4});
  WarningCapture w;
  auto loss_at_one_site = [&] { return mse_loss(input, target); };
  CHECK(loss_at_one_site().numel() == 1);
  CHECK(loss_at_one_site().numel() == 1);  // same site: no second warning
  REQUIRE(w.messages().size() == 1);
  const std::string m = w.messages()[0];
  CHECK(m.find("mse_loss: using a target size [4] that is different to the input size [4, 1]") !=
        std::string::npos);
  CHECK(m.find("broadcast to [4, 4]") != std::string::npos);
  CHECK(m.find("test_loss_elementwise.cpp") != std::string::npos);  // names the caller's line
  F::mse_loss(input, target);                                       // another site warns again
  CHECK(w.messages().size() == 2);
  for (const char* op : {"l1_loss", "smooth_l1_loss", "huber_loss"}) {
    CAPTURE(op);
    const size_t before = w.messages().size();
    const std::string name = op;
    if (name == "l1_loss") F::l1_loss(input, target);
    if (name == "smooth_l1_loss") F::smooth_l1_loss(input, target);
    if (name == "huber_loss") F::huber_loss(input, target);
    REQUIRE(w.messages().size() == before + 1);
    CHECK(w.messages().back().rfind(name + ": using a target size [4]", 0) == 0);
  }
  // The Module form warns too (without a call site inside minidl).
  nn::MSELoss crit;
  crit(input, target);
  CHECK(w.messages().back().find("mse_loss: using a target size") != std::string::npos);
  CHECK(w.messages().back().find("called at") == std::string::npos);
  // Same shapes, or a target that is already the input's shape: silent.
  const size_t n = w.messages().size();
  F::mse_loss(input, zeros({4, 1}));
  nn::L1Loss()(input, zeros({4, 1}));
  CHECK(w.messages().size() == n);
}

TEST_CASE("binary_cross_entropy refuses other target shapes and values outside [0, 1]") {
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(full({4, 1}, 0.5), zeros({4})),
                       doctest::Contains("target size [4] that is different to the input size "
                                         "[4, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(full({2}, 1.5), zeros({2})),
                       doctest::Contains("between 0 and 1"), Error);
  // The logs are clamped at -100, as in PyTorch: p = 0 with target 1 costs 100, not inf.
  CHECK(F::binary_cross_entropy(zeros({1}), ones({1})).item<double>() == doctest::Approx(100.0));
}

TEST_CASE("loss Modules: names, options and the functional forms they call") {
  Tensor x = random_tensor({3, 4}, kFloat32, 1), y = random_tensor({3, 4}, kFloat32, 2);
  CHECK(bitwise_equal(nn::SmoothL1Loss(Reduction::sum, 0.5)(x, y),
                      F::smooth_l1_loss(x, y, Reduction::sum, 0.5)));
  CHECK(bitwise_equal(nn::HuberLoss(Reduction::mean, 0.7)(x, y),
                      huber_loss(x, y, Reduction::mean, 0.7)));
  CHECK(bitwise_equal(nn::L1Loss(Reduction::none)(x, y), l1_loss(x, y, Reduction::none)));
  Tensor p = sigmoid(x), t = sigmoid(y), w = full({4}, 2.0);
  nn::BCELoss bce(w);
  CHECK(bce.name() == "BCELoss");
  CHECK(bce.state_dict().count("weight") == 1);  // a buffer, as in PyTorch
  CHECK(bitwise_equal(bce(p, t), binary_cross_entropy(p, t, w)));
  CHECK_THROWS_WITH_AS(F::huber_loss(x, y, Reduction::mean, 0.0), doctest::Contains("delta"),
                       Error);
  CHECK_THROWS_WITH_AS(F::smooth_l1_loss(x, y, Reduction::mean, -1.0), doctest::Contains("beta"),
                       Error);
}

TEST_CASE("element-wise losses run in float32 under CPU autocast (torch 1.13's CPU list)") {
  Tensor x = testutil::random_tensor({3, 4}, kBFloat16, 1);
  Tensor y = testutil::random_tensor({3, 4}, kBFloat16, 2);
  amp::autocast region(DeviceType::cpu, kBFloat16);
  CHECK(F::mse_loss(x, y).dtype() == kFloat32);
  CHECK(F::l1_loss(x, y).dtype() == kFloat32);
  CHECK(F::smooth_l1_loss(x, y).dtype() == kFloat32);
  CHECK(F::huber_loss(x, y).dtype() == kFloat32);
  CHECK(F::binary_cross_entropy(sigmoid(x), sigmoid(y)).dtype() == kFloat32);
}
