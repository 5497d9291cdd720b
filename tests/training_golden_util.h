// Shared helpers of the golden training trajectories (tests/data/golden_traj.json, made by
// tools/golden/gen_trajectories.py): closed-form weights and inputs, the models, and one
// training run compared with PyTorch on any device (test_training_golden, test_cuda_training).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "golden.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace golden_traj {
using namespace minidl;
using namespace testutil;

inline const json& G() {
  return golden("golden_traj.json");
}

// Same closed forms as the generator (computed in f64, rounded to f32 like the Python side).
// A Weyl/Knuth multiplicative sequence in [0, 1): exact integer math, identical in Python.
inline double unit(int64_t i, int64_t k) {
  const uint64_t v =
      (uint64_t(i) * 2654435761ull + uint64_t(k) * 97531ull + 12345ull) % 4294967296ull;
  return double(v) / 4294967296.0;
}
inline double init_value(int64_t i, int64_t k, int64_t fan_in) {
  return (2.0 * unit(i, k) - 1.0) / std::sqrt(double(fan_in));
}
inline double input_value(int64_t i, int64_t step) {
  return unit(i, 1000 + step);
}

inline std::shared_ptr<nn::Sequential> make_model(const std::string& name, Shape& in_shape) {
  if (name == "mlp") {
    in_shape = {16, 20};
    return std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(20, 32),
                                                           std::make_shared<nn::ReLU>(),
                                                           std::make_shared<nn::Linear>(32, 10)});
  }
  in_shape = {8, 1, 28, 28};
  return std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Conv2d>(32, 64, 3), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(9216, 128), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(128, 10)});
}

// f64 values rounded through f32 (both dtypes start from the same f32 values, as in Python).
inline Tensor f32_rounded(std::vector<double> v, const Shape& shape, DType dt) {
  for (double& x : v) x = double(float(x));
  return from_f64(v, shape, dt);
}

inline nn::StateDict initial_state(const json& init, DType dt) {
  nn::StateDict sd;
  int64_t k = 0;
  for (const auto& m : init) {
    Shape shape = m["shape"].get<Shape>();
    int64_t n = 1, fan_in = m["fan_in"].get<int64_t>();
    for (int64_t d : shape) n *= d;
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = init_value(i, k, fan_in);
    sd[m["name"].get<std::string>()] = f32_rounded(v, shape, dt);
    ++k;
  }
  return sd;
}

struct Errors {
  double loss = 0, weight = 0, weight_norm = 0, sums = 0;
};

// Relative error with a floor (1e-3 of the tensor's largest golden magnitude) so entries that
// pass near zero do not blow the ratio up.
inline double rel_err(double got, double want, double floor) {
  return std::abs(got - want) / std::max(std::abs(want), floor);
}

inline Errors train_and_compare(const std::string& model_name, const std::string& opt_name,
                                DType dt, double rtol, double elem_rtol, Device device = kCPU) {
  Shape in_shape;
  auto model = make_model(model_name, in_shape);
  model->to(dt);
  auto res = model->load_state_dict(initial_state(G()[model_name]["init"], dt));
  REQUIRE(res.missing_keys.empty());
  REQUIRE(res.unexpected_keys.empty());
  model->to(device);
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "sgd")
    opt = std::make_unique<optim::SGD>(model->parameters(), 0.05, 0.9);
  else
    opt = std::make_unique<optim::AdamW>(model->parameters(), 1e-3);

  const json& gold = G()[model_name][opt_name + (dt == kFloat32 ? "_f32" : "_f64")];
  const int steps = G()["steps"].get<int>();
  int64_t n_in = 1;
  for (int64_t d : in_shape) n_in *= d;
  Errors e;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> xv(static_cast<size_t>(n_in)), yv(static_cast<size_t>(in_shape[0]));
    for (int64_t i = 0; i < n_in; ++i) xv[size_t(i)] = input_value(i, s);
    for (int64_t i = 0; i < in_shape[0]; ++i) yv[size_t(i)] = double((s * 7 + i * 3) % 10);
    Tensor x = f32_rounded(xv, in_shape, dt).to(device);
    Tensor y = from_f64(yv, {in_shape[0]}, kInt64).to(device);
    opt->zero_grad();
    Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    loss.backward();
    opt->step();
    double got = loss.item<double>(), want = gold["losses"][s].get<double>();
    double err = rel_err(got, want, 0);
    e.loss = std::max(e.loss, err);
    CHECK_MESSAGE(err <= rtol, "step ", s, " loss ", got, " vs ", want);
  }
  for (const auto& [name, p] : model->named_parameters()) {
    CAPTURE(name);
    const json& g = gold["params"][name];
    REQUIRE(p.shape() == g["shape"].get<Shape>());
    std::vector<double> got = to_f64(p);
    std::vector<double> want;
    int64_t stride = 1;
    if (g.contains("data")) {
      want = g["data"].get<std::vector<double>>();
    } else {
      want = g["sample"].get<std::vector<double>>();
      stride = g["stride"].get<int64_t>();
      double sum = 0, sumsq = 0;
      for (double v : got) sum += v, sumsq += v * v;
      double es = std::max(rel_err(sum, g["sum"].get<double>(), 0),
                           rel_err(sumsq, g["sumsq"].get<double>(), 0));
      e.sums = std::max(e.sums, es);
      // Sums cancel (the sum of a zero-mean tensor); compare with a scale of sqrt(n)*rms.
      double scale = std::sqrt(double(got.size()) * g["sumsq"].get<double>());
      CHECK(rel_err(sum, g["sum"].get<double>(), scale) <= elem_rtol);
      CHECK(rel_err(sumsq, g["sumsq"].get<double>(), 0) <= rtol);
    }
    double maxabs = 0, diff_sq = 0, want_sq = 0;
    for (double v : want) maxabs = std::max(maxabs, std::abs(v));
    for (size_t k = 0; k < want.size(); ++k) {
      double g_k = got[k * size_t(stride)];
      diff_sq += (g_k - want[k]) * (g_k - want[k]);
      want_sq += want[k] * want[k];
      double err = rel_err(g_k, want[k], 1e-3 * maxabs);
      e.weight = std::max(e.weight, err);
      CHECK_MESSAGE(err <= elem_rtol, name, "[", k * size_t(stride), "]: ", g_k, " vs ", want[k]);
    }
    // The 1e-5 target, per tensor: ||w - w_torch|| / ||w_torch||.
    double norm_err = std::sqrt(diff_sq / want_sq);
    e.weight_norm = std::max(e.weight_norm, norm_err);
    CHECK_MESSAGE(norm_err <= rtol, name, ": relative norm error ", norm_err);
  }
  return e;
}

// f64 (both sides f64) is the exact check at 1e-9. In f32, losses and each weight tensor (as a
// norm-relative error) are held to 1e-5. Single f32 entries drift further from PyTorch's by
// accumulated rounding (other summation orders in conv/matmul; AdamW's m/sqrt(v) amplifies it for
// near-zero gradients: 2.2e-4 seen), so each entry is held to 5e-4 and the maximum reported.
inline void run_case(const std::string& model_name, const std::string& opt_name,
                     Device device = kCPU) {
  struct Tol {
    DType dt;
    double rtol, elem_rtol;
  };
  for (auto [dt, rtol, elem_rtol] : {Tol{kFloat32, 1e-5, 5e-4}, Tol{kFloat64, 1e-9, 1e-9}}) {
    CAPTURE(dt);
    Errors e = train_and_compare(model_name, opt_name, dt, rtol, elem_rtol, device);
    MESSAGE(device, " ", model_name, " ", opt_name, " ", (dt == kFloat32 ? "f32" : "f64"),
            ": max rel err losses ", e.loss, ", weights (norm) ", e.weight_norm,
            ", weights (entry) ", e.weight, ", sums ", e.sums);
  }
}

}  // namespace golden_traj
