// Checks against tests/data/golden_torch_diffs.json (tools/golden/gen_torch_diffs.py, PyTorch
// 1.13) on a given device: clamp's type promotion, binary_cross_entropy_with_logits' gradient,
// topk's gradient, and max/min/amax/amin/maximum/minimum gradients with ties and NaN.
#pragma once
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "golden.h"
#include "nn/loss.h"

namespace torch_diffs {
using namespace minidl;
using testutil::json;

inline DType parse_dtype(const std::string& s) {
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool})
    if (dtype_name(t) == s) return t;
  FAIL("unknown dtype in golden file: ", s);
  return kFloat32;
}

// Values with NaN written as null.
inline std::vector<double> values(const json& o) {
  std::vector<double> v;
  for (const json& e : o["data"])
    v.push_back(e.is_null() ? std::numeric_limits<double>::quiet_NaN() : e.get<double>());
  return v;
}

// The golden tensor on `dev` in its recorded dtype (or `dt`), optionally a leaf.
inline Tensor tensor(const json& o, Device dev, bool requires_grad = false,
                     std::optional<DType> dt = std::nullopt) {
  Tensor t = testutil::from_f64(values(o), o["shape"].get<Shape>(),
                                dt ? *dt : parse_dtype(o["dtype"].get<std::string>()))
                 .to(dev);
  if (requires_grad) t.requires_grad_();
  return t;
}

inline void check(const Tensor& got, const json& want, double rtol = 1e-12, double atol = 1e-12) {
  REQUIRE(got.defined());
  CHECK(got.shape() == want["shape"].get<Shape>());
  CHECK(dtype_name(got.dtype()) == want["dtype"].get<std::string>());
  testutil::check_close(got.cpu(), values(want), rtol, atol);
}

inline std::optional<Scalar> bound(const json& b) {
  if (b.is_null()) return std::nullopt;
  if (b["kind"] == "int") return Scalar(b["value"].get<int64_t>());
  return Scalar(b["value"].get<double>());
}

// clamp with scalar bounds promotes like PyTorch: int + float bound -> f32, bool + int -> int64.
inline void check_clamp(Device dev) {
  const json& cases = testutil::golden("golden_torch_diffs.json")["clamp"];
  REQUIRE(cases.size() > 20);
  for (const json& c : cases) {
    CAPTURE(c.dump());
    Tensor x = tensor(c["x"], dev);
    Tensor out = clamp(x, bound(c["min"]), bound(c["max"]));
    CHECK(out.device() == dev);
    check(out, c["out"], 1e-6, 1e-6);
    Tensor y = x.clone();
    if (out.dtype() == x.dtype()) {
      clamp_(y, bound(c["min"]), bound(c["max"]));
      check(y, c["out"], 1e-6, 1e-6);
    } else {  // in place cannot promote
      CHECK_THROWS_WITH_AS(clamp_(y, bound(c["min"]), bound(c["max"])),
                           doctest::Contains("can't be cast to the desired output type"), Error);
    }
  }
}

inline void check_bce(Device dev) {
  const json& cases = testutil::golden("golden_torch_diffs.json")["bce"];
  REQUIRE(cases.size() == 12);
  for (const json& c : cases) {
    CAPTURE(c["reduction"].get<std::string>());
    CAPTURE(c["weight"].is_null());
    CAPTURE(c["pos_weight"].is_null());
    Tensor x = tensor(c["x"], dev, true), y = tensor(c["y"], dev, true);
    Tensor w = c["weight"].is_null() ? Tensor() : tensor(c["weight"], dev);
    Tensor pw = c["pos_weight"].is_null() ? Tensor() : tensor(c["pos_weight"], dev);
    Tensor out = nn::functional::binary_cross_entropy_with_logits(
        x, y, w, nn::parse_reduction(c["reduction"].get<std::string>()), pw);
    check(out, c["out"]);
    out.backward(tensor(c["grad_out"], dev));
    check(x.grad(), c["grad_x"]);
    check(y.grad(), c["grad_y"]);
  }
}

inline void check_topk(Device dev) {
  const json& cases = testutil::golden("golden_torch_diffs.json")["topk"];
  REQUIRE(cases.size() == 5);
  for (const json& c : cases) {
    CAPTURE(c["x"]["shape"].dump());
    CAPTURE(c["dim"].get<int64_t>());
    Tensor x = tensor(c["x"], dev, true);
    auto [v, i] =
        topk(x, c["k"].get<int64_t>(), c["dim"].get<int64_t>(), c["largest"].get<bool>(), true);
    check(v, c["values"]);
    check(i, c["indices"]);
    REQUIRE(v.requires_grad());
    CHECK_FALSE(i.requires_grad());
    v.backward(tensor(c["grad_out"], dev));
    check(x.grad(), c["grad_x"]);
  }
}

inline void check_reductions(Device dev) {
  const json& cases = testutil::golden("golden_torch_diffs.json")["reduce"];
  REQUIRE(cases.size() > 30);
  for (const json& c : cases) {
    const std::string op = c["op"].get<std::string>();
    CAPTURE(op);
    CAPTURE(c["dim"].dump());
    CAPTURE(c["x"].dump());
    Tensor x = tensor(c["x"], dev, true);
    Tensor out, indices;
    if (c["dim"].is_null()) {
      out = op == "max" ? max(x) : op == "min" ? min(x) : op == "amax" ? amax(x) : amin(x);
    } else {
      const int64_t d = c["dim"].get<int64_t>();
      if (op == "max" || op == "min") {
        std::tie(out, indices) = op == "max" ? max(x, d) : min(x, d);
        check(indices, c["indices"]);
      } else {
        out = op == "amax" ? amax(x, {d}) : amin(x, {d});
      }
    }
    check(out, c["out"]);
    out.backward(tensor(c["grad_out"], dev));
    check(x.grad(), c["grad_x"]);
  }
}

inline void check_maximum_minimum(Device dev) {
  const json& cases = testutil::golden("golden_torch_diffs.json")["binary"];
  REQUIRE(cases.size() == 2);
  for (const json& c : cases) {
    CAPTURE(c["op"].get<std::string>());
    Tensor a = tensor(c["a"], dev, true), b = tensor(c["b"], dev, true);
    Tensor out = c["op"] == "maximum" ? maximum(a, b) : minimum(a, b);
    check(out, c["out"]);
    out.backward(tensor(c["grad_out"], dev));
    check(a.grad(), c["grad_a"]);
    check(b.grad(), c["grad_b"]);
  }
}

}  // namespace torch_diffs
