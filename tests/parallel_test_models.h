// Small models and helpers shared by the DataParallel and DDP tests: a conv net with optional
// BatchNorm and an optionally unused layer, deterministic data, one SGD step, and the largest
// relative difference between two models' parameters.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "minidl.h"
#include "test_util.h"

namespace ptest {
using namespace minidl;

// x:[B,1,8,8] -> conv3x3 [B,4,6,6] (-> BatchNorm) -> relu -> fc [B,10]; fc3 is never used
// when unused_fc3 (an unused-parameter trap).
class SmallNet : public nn::Cloneable<SmallNet> {
 public:
  explicit SmallNet(bool batch_norm = false, bool unused_fc3 = false, bool use_fc3 = false)
      : use_fc3_(use_fc3) {
    conv = std::make_shared<nn::Conv2d>(1, 4, 3);
    register_module("conv", &conv);
    if (batch_norm) {
      bn = std::make_shared<nn::BatchNorm2d>(4);
      register_module("bn", &bn);
    }
    fc = std::make_shared<nn::Linear>(4 * 6 * 6, 10);
    register_module("fc", &fc);
    if (unused_fc3 || use_fc3) {
      fc3 = std::make_shared<nn::Linear>(10, 10);
      register_module("fc3", &fc3);
    }
  }
  Tensor forward(const Tensor& x) override {
    // Through operator(): wrappers' hooks (FSDP units, module hooks) see every call.
    Tensor h = (*conv)(x);
    if (bn) h = (*bn)(h);
    h = (*fc)(relu(h).flatten(1));
    return use_fc3_ ? (*fc3)(h) : h;
  }
  std::string name() const override { return "SmallNet"; }
  bool use_fc3_;
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc, fc3;
};

// Global batch `step` of `rows` samples (the same on every rank and process).
inline Tensor batch_x(int step, int64_t rows) {
  return testutil::random_tensor({rows, 1, 8, 8}, kFloat32, 1000 + uint64_t(step));
}
inline Tensor batch_y(int step, int64_t rows) {
  return testutil::random_tensor({rows}, kInt64, 2000 + uint64_t(step), 0, 10);
}

inline Tensor loss_of(nn::Module& m, const Tensor& x, const Tensor& y) {
  return nn::functional::cross_entropy(m.forward(x), y);
}

// Plain SGD (lr 0.1) on every parameter with a gradient, then clears the gradients.
inline void sgd_step(nn::Module& m, double lr = 0.1) {
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    add_(p, p.grad(), -lr);
    p.mutable_grad() = Tensor();
  }
}

// max over tensors of |a - b|_inf / max(|b|_inf, 1e-12) for parameters (and buffers) by name.
inline double max_rel_diff(const nn::StateDict& a, const nn::StateDict& b) {
  double worst = 0;
  for (const auto& [name, tb] : b) {
    auto it = a.find(name);
    if (it == a.end()) return INFINITY;
    Tensor x = it->second.to(kFloat64), y = tb.to(kFloat64);
    double diff = max(abs(sub(x, y))).item<double>();
    double scale = std::max(max(abs(y)).item<double>(), 1e-12);
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace ptest
