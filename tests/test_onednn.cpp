// The oneDNN CPU path against the Eigen path and f64 references: conv2d (forward, backward
// input/weight) and bmm/matmul/linear in f32 and bf16 over the shape classes and layouts the
// frontends pass; the backend switch, its execution counter, and f64 never reaching oneDNN.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "tensor/cpu/onednn.h"
#include "tensor/cpu_isa.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// Sets the CPU backend for a scope and restores the previous one.
struct BackendScope {
  CpuBackend saved = cpu_backend();
  explicit BackendScope(CpuBackend b) { set_cpu_backend(b); }
  ~BackendScope() { set_cpu_backend(saved); }
};

// Sets how bf16 convolutions compute on oneDNN for a scope (back to automatic after).
struct Bf16Scope {
  explicit Bf16Scope(Bf16Compute c) { set_onednn_bf16_compute(c); }
  ~Bf16Scope() { set_onednn_bf16_compute(Bf16Compute::automatic); }
};

// bf16 results: relative 2^-8 of the value plus 2^-8 of the largest reference value (the f32
// accumulation of bf16 products cancels to small values); f16 2e-3; f32 1e-5.
void close_to(const Tensor& got, const Tensor& ref) {
  REQUIRE(got.shape() == ref.shape());
  std::vector<double> r = to_f64(ref);
  double scale = 0;
  for (double v : r) scale = std::max(scale, std::abs(v));
  if (got.dtype() == kBFloat16)
    check_close(got, r, std::ldexp(1.0, -8), std::ldexp(1.0, -8) * scale);
  else if (got.dtype() == kFloat16)
    check_close(got, r, 2e-3, 2e-3 * scale);
  else
    check_close(got, r, 1e-5, 1e-5 * std::max(scale, 1e-30));
}

Conv2dParams params(int64_t s, int64_t pad, int64_t d, int64_t g) {
  Conv2dParams p;
  p.stride[0] = p.stride[1] = s;
  p.padding[0] = p.padding[1] = pad;
  p.dilation[0] = p.dilation[1] = d;
  p.groups = g;
  return p;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) {
  return (in + 2 * pad - d * (k - 1) - 1) / s + 1;
}

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, O, k, s, pad, d, g;
};

const ConvCase kConvCases[] = {
    {"mnist conv1", 8, 1, 28, 28, 32, 3, 1, 0, 1, 1},
    {"mnist conv2", 4, 32, 26, 26, 64, 3, 1, 0, 1, 1},
    {"1x1", 3, 8, 7, 9, 12, 1, 1, 0, 1, 1},
    {"strided padded", 2, 6, 11, 10, 8, 3, 2, 1, 1, 1},
    {"dilated", 2, 4, 12, 12, 6, 3, 1, 2, 2, 1},
    {"grouped", 3, 6, 9, 9, 9, 3, 1, 1, 1, 3},
    {"depthwise", 2, 8, 10, 10, 8, 3, 1, 1, 1, 8},
    {"1x1 strided", 2, 4, 9, 9, 6, 1, 2, 0, 1, 1},
    {"zero batch", 0, 3, 5, 5, 4, 3, 1, 0, 1, 1},
    // 16 MiB chunks of reordered images: 71 (f32) / 143 (bf16) images each, a short last one
    {"chunked batch", 150, 32, 26, 26, 64, 3, 1, 0, 1, 1},
};

}  // namespace

TEST_CASE("cpu backend switch: setter, names, f64 never reaches oneDNN") {
  BackendScope scope(CpuBackend::eigen);
  CHECK(cpu_backend() == CpuBackend::eigen);
  CHECK(std::string(cpu_backend_name(CpuBackend::automatic)) == "auto");
  Tensor x = random_tensor({2, 3, 6, 6}, kFloat32, 1), w = random_tensor({4, 3, 3, 3}, kFloat32, 2);
  Tensor a = random_tensor({5, 7}, kFloat32, 3), b = random_tensor({7, 6}, kFloat32, 4);
  const int64_t before = onednn_executions();
  conv2d(x, w, {}, params(1, 0, 1, 1));
  matmul(a, b);
  CHECK(onednn_executions() == before);  // eigen: no oneDNN primitive ran
  if (!onednn_available()) {
    CHECK_THROWS_AS(set_cpu_backend(CpuBackend::onednn), Error);
    return;
  }
  set_cpu_backend(CpuBackend::onednn);
  conv2d(x, w, {}, params(1, 0, 1, 1));
  CHECK(onednn_executions() == before + 1);
  matmul(a, b);
  CHECK(onednn_executions() == before + 2);
  matmul(a.to(kBFloat16), b.to(kBFloat16));
  CHECK(onednn_executions() == before + 3);
  // f64 (gradcheck's dtype) and f16 stay on Eigen even when oneDNN is forced
  conv2d(x.to(kFloat64), w.to(kFloat64), {}, params(1, 0, 1, 1));
  matmul(a.to(kFloat64), b.to(kFloat64));
  matmul(a.to(kFloat16), b.to(kFloat16));
  CHECK(onednn_executions() == before + 3);
  Tensor xl = leaf({1, 2, 5, 5}, 5), wl = leaf({2, 2, 3, 3}, 6);
  GRADCHECK([](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], {}, {}); },
            std::vector<Tensor>{xl, wl});
  CHECK(onednn_executions() == before + 3);
}

TEST_CASE("conv2d: oneDNN, Eigen and f64 agree on every shape class (f32, bf16)") {
  uint64_t seed = 100;
  for (const ConvCase& c : kConvCases) {
    for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
      INFO(std::string(c.name), " dtype ", dtype_name(dt));
      const Conv2dParams p = params(c.s, c.pad, c.d, c.g);
      const Shape xs{c.N, c.C, c.H, c.W}, ws{c.O, c.g ? c.C / c.g : 0, c.k, c.k};
      const Shape os{c.N, c.O, out_size(c.H, c.k, c.s, c.pad, c.d),
                     out_size(c.W, c.k, c.s, c.pad, c.d)};
      Tensor x = random_tensor(xs, dt, seed++), w = random_tensor(ws, dt, seed++);
      Tensor b = random_tensor({c.O}, dt, seed++), g = random_tensor(os, dt, seed++);
      // the frontends make non-contiguous inputs contiguous: pass them non-contiguous here
      auto run = [&](CpuBackend be, const Tensor& xx, const Tensor& ww, const Tensor& bb,
                     const Tensor& gg) {
        BackendScope scope(be);
        return std::array<Tensor, 3>{conv2d(noncontiguous(xx), noncontiguous(ww), bb, p),
                                     conv2d_backward_input(noncontiguous(gg), ww, xs, p),
                                     conv2d_backward_weight(gg, noncontiguous(xx), ws, p)};
      };
      auto ref =
          run(CpuBackend::eigen, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), g.to(kFloat64));
      auto eig = run(CpuBackend::eigen, x, w, b, g);
      for (int i = 0; i < 3; ++i) close_to(eig[size_t(i)], ref[size_t(i)]);
      if (!onednn_available()) continue;
      // bf16 on oneDNN's bf16 kernels (native or emulated) and on its f32 kernels
      for (Bf16Compute mode : {Bf16Compute::bf16, Bf16Compute::f32}) {
        if (dt != kBFloat16 && mode == Bf16Compute::f32) continue;
        INFO("bf16 compute ", mode == Bf16Compute::f32 ? "f32" : "bf16");
        Bf16Scope bf16_scope(mode);
        const int64_t before = onednn_executions();
        auto dnn = run(CpuBackend::onednn, x, w, b, g);
        const bool routed = dt != kFloat16 && c.N > 0 && c.C > 0;
        CHECK(onednn_executions() - before >= (routed ? 3 : 0));
        if (!routed) CHECK(onednn_executions() == before);
        for (int i = 0; i < 3; ++i) {
          close_to(dnn[size_t(i)], ref[size_t(i)]);
          close_to(dnn[size_t(i)], eig[size_t(i)].to(kFloat64));
        }
      }
    }
  }
}

TEST_CASE("bf16 conv compute: the setting, the CPU's native bf16, automatic's choice") {
  if (!onednn_available()) {
    CHECK_FALSE(onednn_native_bf16());
    return;
  }
  {
    Bf16Scope scope(Bf16Compute::f32);
    CHECK(onednn_bf16_in_f32());
  }
  {
    // oneDNN has bf16 kernels from AVX-512 up (native with avx512_bf16); below, f32 always
    Bf16Scope scope(Bf16Compute::bf16);
    CHECK(onednn_bf16_in_f32() == !onednn_bf16_kernels());
  }
  INFO("CPU class ", cpu_isa_summary());
  CHECK(onednn_bf16_kernels() == (cpu_isa() >= CpuIsa::avx512));
  CHECK(onednn_native_bf16() == (cpu_isa() >= CpuIsa::avx512_bf16));
  Bf16Scope scope(Bf16Compute::automatic);
  CHECK(onednn_bf16_in_f32() == !onednn_native_bf16());
  // Both modes multiply bf16 values exactly and sum in f32, rounding once: on small integers
  // (|sum| <= 288 * 16 < 2^24, exact in f32) the result is the exact sum rounded to bf16.
  BackendScope be(CpuBackend::onednn);
  auto ints = [](const Shape& s, uint32_t seed) {
    std::vector<float> v(size_t(s[0] * s[1] * s[2] * s[3]));
    for (float& f : v) {
      seed = seed * 1664525u + 1013904223u;
      f = float(int((seed >> 16) % 9) - 4);
    }
    return from_blob(v.data(), s, kFloat32).to(kBFloat16);
  };
  Tensor x = ints({2, 32, 6, 6}, 31), w = ints({8, 32, 3, 3}, 32);
  Tensor want = conv2d(x.to(kFloat64), w.to(kFloat64), {}, {}).to(kBFloat16);
  for (Bf16Compute mode : {Bf16Compute::bf16, Bf16Compute::f32}) {
    Bf16Scope m(mode);
    check_close(conv2d(x, w, {}, {}), want, 0.0, 0.0);
  }
}

TEST_CASE("conv2d: the oneDNN path trains like Eigen (autograd through conv2d, f32)") {
  if (!onednn_available()) return;
  Tensor x = random_tensor({3, 2, 8, 8}, kFloat32, 7),
         w0 = random_tensor({4, 2, 3, 3}, kFloat32, 8);
  auto grads = [&](CpuBackend be) {
    BackendScope scope(be);
    Tensor w = w0.clone();
    w.requires_grad_();
    Tensor y = conv2d(x, w, {}, params(1, 1, 1, 1));
    sum(mul(y, y)).backward();
    return w.grad();
  };
  close_to(grads(CpuBackend::onednn), grads(CpuBackend::eigen));
}

TEST_CASE("bmm / matmul / linear: oneDNN, Eigen and f64 agree (layouts, broadcast, f32, bf16)") {
  struct MmCase {
    const char* name;
    Shape a, b;
    bool ta, tb;  // pass the operand as a transposed view of its transpose
  };
  const MmCase cases[] = {
      {"square", {64, 64}, {64, 64}, false, false},
      {"rect", {33, 70}, {70, 17}, false, false},
      {"a transposed", {40, 30}, {30, 20}, true, false},
      {"b transposed (linear)", {16, 48}, {48, 24}, false, true},
      {"both transposed", {9, 13}, {13, 11}, true, true},
      {"batched", {3, 12, 20}, {3, 20, 8}, false, false},
      {"batched transposed", {4, 10, 6}, {4, 6, 12}, true, true},
      {"broadcast batch", {2, 3, 8, 5}, {5, 7}, false, false},
      {"matrix-vector", {6, 9}, {9}, false, false},
      {"vector-matrix", {9}, {9, 4}, false, false},
      {"row", {1, 300}, {300, 1}, false, false},
      {"K zero", {4, 0}, {0, 5}, false, false},
      {"M zero", {0, 7}, {7, 3}, false, false},
      // bf16 on f32 kernels widens 16 MiB at a time: row chunks of 1048, batch chunks of 2
      {"chunked rows", {1100, 4000}, {4000, 2}, true, false},
      {"chunked batch", {3, 400, 4000}, {3, 4000, 3}, false, true},
  };
  uint64_t seed = 500;
  for (const MmCase& c : cases) {
    for (DType dt : {kFloat32, kBFloat16}) {
      INFO(std::string(c.name), " dtype ", dtype_name(dt));
      auto make = [&](const Shape& s, bool t) {
        if (!t || s.size() < 2) return random_tensor(s, dt, seed++);
        Shape st = s;
        std::swap(st[st.size() - 1], st[st.size() - 2]);
        return random_tensor(st, dt, seed++).transpose(-1, -2);
      };
      Tensor a = make(c.a, c.ta), b = make(c.b, c.tb);
      auto run = [&](CpuBackend be, const Tensor& aa, const Tensor& bb) {
        BackendScope scope(be);
        return matmul(aa, bb);
      };
      Tensor ref = run(CpuBackend::eigen, a.to(kFloat64), b.to(kFloat64));
      Tensor eig = run(CpuBackend::eigen, a, b);
      close_to(eig, ref);
      if (!onednn_available()) continue;
      for (Bf16Compute mode : {Bf16Compute::bf16, Bf16Compute::f32}) {
        if (dt != kBFloat16 && mode == Bf16Compute::f32) continue;
        INFO("bf16 compute ", mode == Bf16Compute::f32 ? "f32" : "bf16");
        Bf16Scope bf16_scope(mode);
        Tensor dnn = run(CpuBackend::onednn, a, b);
        close_to(dnn, ref);
        close_to(dnn, eig.to(kFloat64));
        // non-contiguous operands (every other column): copied, then oneDNN
        if (a.dim() == 2 && b.dim() == 2)
          close_to(run(CpuBackend::onednn, noncontiguous(a), b), ref);
      }
    }
  }
  // linear = x @ w^T + b with w [out, in]: the transposed-weight view goes straight to oneDNN
  if (!onednn_available()) return;
  int seen_bf16 = 0;
  for (DType dt : {kFloat32, kBFloat16, kBFloat16}) {
    // the second bf16 pass on f32 kernels
    Bf16Scope bf16_scope(dt == kBFloat16 && seen_bf16++ ? Bf16Compute::f32 : Bf16Compute::bf16);
    Tensor x = random_tensor({32, 50}, dt, 900), w = random_tensor({10, 50}, dt, 901);
    Tensor bias = random_tensor({10}, dt, 902);
    Tensor ref;
    {
      BackendScope s(CpuBackend::eigen);
      ref = linear(x.to(kFloat64), w.to(kFloat64), bias.to(kFloat64));
    }
    BackendScope s(CpuBackend::onednn);
    const int64_t before = onednn_executions();
    Tensor y = linear(x, w, bias);
    CHECK(onednn_executions() == before + 1);
    close_to(y, ref);
  }
}

TEST_CASE("bf16 linear with a bias on oneDNN: one rounding of the f32 accumulator plus bias") {
  if (!onednn_available()) return;
  BackendScope s(CpuBackend::onednn);
  // 3-D input (folded to [21,50]) and a non-contiguous weight view
  Tensor x = random_tensor({3, 7, 50}, kBFloat16, 910);
  Tensor w = noncontiguous(random_tensor({10, 50}, kBFloat16, 911));
  Tensor bias = mul(random_tensor({10}, kBFloat16, 912), 8.0);
  Tensor ref = linear(x.to(kFloat64), w.to(kFloat64), bias.to(kFloat64));
  for (Bf16Compute mode : {Bf16Compute::bf16, Bf16Compute::f32}) {
    INFO("bf16 compute ", mode == Bf16Compute::f32 ? "f32" : "bf16");
    Bf16Scope bf16_scope(mode);
    const int64_t before = onednn_executions();
    Tensor y = linear(x, w, bias);
    CHECK(onednn_executions() == before + 1);  // the bias rides on the matmul
    REQUIRE(y.shape() == Shape{3, 7, 10});
    // rounded once: within half a bf16 ulp (8 significant bits) of the f64 value, plus the f32
    // accumulation error; matmul + add_ rounded twice and missed that on some elements
    std::vector<double> r = to_f64(ref), got = to_f64(y);
    int bad = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      int e = 0;
      std::frexp(r[i], &e);  // |r| in [2^(e-1), 2^e): bf16 spacing 2^(e-8)
      if (std::abs(got[i] - r[i]) > std::ldexp(1.0, e - 9) * 1.001 + 1e-5) ++bad;
    }
    CHECK(bad == 0);
  }
}
