// Suite cuda: the CUDA reduction (sum, mean, var, amax, amin, logsumexp, max/min(dim)) and
// softmax kernels against the CPU kernels (rows, columns, split reductions, transposed and
// offset views, empty and NaN cases), plus determinism of the kernels on 64M elements.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "tensor/cuda_api.h"
#include "autograd/ops.h"
#include "test_util.h"

using namespace minidl;
using testutil::check_close;
using testutil::random_tensor;

namespace {

const Device kGpu{DeviceType::cuda, 0};

Tensor cpu(const Tensor& t) {
  return t.to(kCPU);
}

// (shape, dims, view) cases; view 1 = transposed (last two dims), 2 = drop the first row.
struct RCase {
  Shape shape;
  DimList dims;
  int view = 0;
};
const RCase kReduceCases[] = {{{37, 513}, {1}},       {{37, 513}, {0}},
                              {{6, 300, 40}, {1}},    {{6, 300, 40}, {0, 1}},
                              {{6, 300, 40}, {1, 2}}, {{3, 200000}, {1}},
                              {{300001}, {0}},        {{100000, 40}, {0}},
                              {{40, 37}, {0}, 1},     {{31, 513}, {1}, 2},
                              {{8, 7}, {0, 1}},       {{5, 0}, {1}},
                              {{0, 5}, {1}},          {{}, {}},
                              {{2000, 64}, {1}},      {{5000, 3}, {1}}};

Tensor make_view(const Tensor& x, int view) {
  if (view == 1) return x.transpose(0, 1);
  if (view == 2) return x.narrow(0, 1, x.size(0) - 1);
  return x;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda reduce kernels match the cpu kernels") {
    const DType all[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool};
    uint64_t seed = 1;
    for (const RCase& c : kReduceCases) {
      for (DType dt : all) {
        const bool fl = is_floating(dt);
        const Tensor xc =
            make_view(random_tensor(c.shape, dt, seed++, fl ? -3 : 0, fl ? 3 : 5), c.view);
        const Tensor xg = make_view(
            random_tensor(c.shape, dt, seed - 1, fl ? -3 : 0, fl ? 3 : 5).to(kGpu), c.view);
        INFO("shape ", shape_str(c.shape), " dims ", shape_str(c.dims), " view ", c.view, " ", dt);
        check_close(cpu(sum(xg, c.dims, true)), sum(xc, c.dims, true));
        bool nonempty = xc.numel() > 0;
        for (int64_t d : c.dims) nonempty = nonempty && xc.size(d) > 0;
        if (nonempty) {
          CHECK(cpu(amax(xg, c.dims)).tolist<double>() == amax(xc, c.dims).tolist<double>());
          CHECK(cpu(amin(xg, c.dims)).tolist<double>() == amin(xc, c.dims).tolist<double>());
        }
        if (fl) {
          check_close(cpu(mean(xg, c.dims)), mean(xc, c.dims));
          check_close(cpu(var(xg, c.dims, 1.0)), var(xc, c.dims, 1.0));
          check_close(cpu(var(xg, c.dims, 0.0, true)), var(xc, c.dims, 0.0, true));
          check_close(cpu(logsumexp(xg, c.dims)), logsumexp(xc, c.dims));
        }
        const int64_t nd = xc.dim();
        for (int64_t d = 0; d < std::max<int64_t>(nd, 1); ++d) {
          if (nd > 0 && xc.size(d) == 0) continue;
          for (bool is_max : {true, false}) {
            auto [vg, ig] = is_max ? max(xg, d) : min(xg, d);
            auto [vc, ic] = is_max ? max(xc, d) : min(xc, d);
            CHECK(cpu(vg).tolist<double>() == vc.tolist<double>());
            CHECK(cpu(ig).tolist<int64_t>() == ic.tolist<int64_t>());
          }
        }
      }
    }
  }

  TEST_CASE("cuda reduce NaN, inf and tie handling") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
    // rows: a NaN late, two NaNs, ties, all -inf, +inf and -inf mixed
    const std::vector<double> v = {1, 3, 3, nan, 2,    3,    nan,  1,    nan, 0,    2, 2,
                                   2, 2, 1, 0,   -inf, -inf, -inf, -inf, inf, -inf, 1, 2};
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const Tensor xc = testutil::from_f64(v, {6, 4}, dt);
      const Tensor xg = xc.to(kGpu);
      INFO(dt);
      for (int64_t d : {0, 1}) {
        for (bool is_max : {true, false}) {
          auto [vg, ig] = is_max ? max(xg, d) : min(xg, d);
          auto [vc, ic] = is_max ? max(xc, d) : min(xc, d);
          check_close(cpu(vg), vc, 0, 0);
          CHECK(cpu(ig).tolist<int64_t>() == ic.tolist<int64_t>());
        }
        check_close(cpu(amax(xg, {d})), amax(xc, {d}), 0, 0);
        check_close(cpu(amin(xg, {d})), amin(xc, {d}), 0, 0);
        check_close(cpu(logsumexp(xg, {d})), logsumexp(xc, {d}));
        check_close(cpu(sum(xg, {d})), sum(xc, {d}));
      }
    }
  }

  TEST_CASE("cuda softmax kernels match the cpu kernels") {
    const std::pair<Shape, int64_t> cases[] = {
        {{7, 50}, 1},      {{5, 1000}, 1},  {{9, 200}, 1},     {{3, 3000}, 1},
        {{4, 1500}, 1},    {{2, 10000}, 1}, {{4, 300, 33}, 1}, {{4, 300, 33}, 0},
        {{4, 300, 33}, 2}, {{}, 0},         {{3, 0, 4}, 1}};
    uint64_t seed = 100;
    for (const auto& [shape, dim] : cases) {
      for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
        INFO("shape ", shape_str(shape), " dim ", dim, " ", dt);
        const Tensor xc = random_tensor(shape, dt, seed++, -8, 8);
        const Tensor gc = random_tensor(shape, dt, seed++, -1, 1);
        const Tensor xg = xc.to(kGpu), gg = gc.to(kGpu);
        const Tensor sc = softmax(xc, dim), lc = log_softmax(xc, dim);
        const Tensor sg = softmax(xg, dim), lg = log_softmax(xg, dim);
        check_close(cpu(sg), sc);
        check_close(cpu(lg), lc);
        // same saved outputs on both devices so the backward compares the kernels only
        check_close(cpu(softmax_backward(gg, sc.to(kGpu), dim)), softmax_backward(gc, sc, dim));
        check_close(cpu(log_softmax_backward(gg, lc.to(kGpu), dim)),
                    log_softmax_backward(gc, lc, dim));
      }
    }
    // NaN / inf rows in every kernel shape
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
    for (int64_t K : {20, 700, 3000, 9000}) {
      std::vector<double> v(size_t(4 * K), 0.5);
      v[size_t(K / 2)] = nan;
      for (int64_t k = 0; k < K; ++k) v[size_t(K + k)] = -inf;
      v[size_t(2 * K + 3)] = inf;
      v[size_t(3 * K + 1)] = -inf;
      const Tensor xc = testutil::from_f64(v, {4, K}, kFloat32);
      for (int64_t d : {0, 1}) {
        check_close(cpu(softmax(xc.to(kGpu), d)), softmax(xc, d));
        check_close(cpu(log_softmax(xc.to(kGpu), d)), log_softmax(xc, d));
      }
    }
  }

  // The kernels' bandwidth at these sizes: bench/bench_cuda_kernels.cpp (membw rows).
  TEST_CASE("cuda reduce and softmax are deterministic on 64M elements") {
    const int64_t n = int64_t(1) << 26;
    const Tensor x = random_tensor({n}, kFloat32, 7).to(kGpu);
    const Tensor xh = random_tensor({n}, kFloat16, 8).to(kGpu);
    const Tensor x2 = x.view({8192, 8192});
    // Run twice, bitwise equal (no dependence on block scheduling or atomics order).
    auto twice = [](const char* name, const std::function<Tensor()>& f) {
      CAPTURE(name);
      const Tensor a = f(), b = f();
      CHECK(testutil::bitwise_equal(a, b));
    };
    twice("sum f32 64M", [&] { return sum(x); });
    twice("sum f16 64M", [&] { return sum(xh); });
    twice("sum f32 [8192,8192] dim1", [&] { return sum(x2, {1}); });
    twice("sum f32 [8192,8192] dim0", [&] { return sum(x2, {0}); });
    twice("amax f32 64M", [&] { return amax(x); });
    twice("var f32 64M", [&] { return var(x); });
    twice("logsumexp f32 [8192,8192] dim1", [&] { return logsumexp(x2, {1}); });
    twice("max(dim) f32 [8192,8192] dim1 values", [&] { return max(x2, 1).first; });
    twice("max(dim) f32 [8192,8192] dim1 indices", [&] { return max(x2, 1).second; });
    for (int64_t K : {1024, 4096}) {
      CAPTURE(K);
      const Tensor s = x.view({n / K, K}), sh = xh.view({n / K, K});
      twice("softmax f32", [&] { return softmax(s, 1); });
      twice("log_softmax f32", [&] { return log_softmax(s, 1); });
      twice("softmax_backward f32", [&] { return softmax_backward(s, s, 1); });
      twice("softmax f16", [&] { return softmax(sh, 1); });
    }
    twice("softmax f32 [64,1024,1024] dim1", [&] { return softmax(x.view({64, 1024, 1024}), 1); });
    // And the large results are right: exact ops equal the CPU's, the sums agree with an f64
    // reference within a bound on f32 rounding (1e-7 of the sum of |x|: a lost block of 1024
    // elements moves the sum by about 37).
    const Tensor xc = cpu(x), x2c = xc.view({8192, 8192});
    CHECK(cpu(amax(x)).item<double>() == amax(xc).item<double>());
    auto [vg, ig] = max(x2, 1);
    auto [vc, ic] = max(x2c, 1);
    CHECK(testutil::bitwise_equal(vg, vc));
    CHECK(testutil::bitwise_equal(ig, ic));
    const Tensor xd = xc.to(kFloat64);
    const double abs_sum = sum(abs(xd)).item<double>();
    check_close(cpu(sum(x)).to(kFloat64), sum(xd), 0, 1e-7 * abs_sum);
    check_close(cpu(sum(x2, {0})).to(kFloat64), sum(xd.view({8192, 8192}), {0}), 1e-5, 1e-2);
    check_close(cpu(var(x)).to(kFloat64), var(xd), 1e-4, 0);
    check_close(cpu(softmax(x.view({n / 4096, 4096}), 1)), softmax(xc.view({n / 4096, 4096}), 1));
  }
}
