// bf16/f16 CPU kernels against f64 references (f32 compute, one rounding at the store:
// tolerances relative to 2^-8 for bf16, 2^-11 for f16), and proof that reductions and add with
// alpha read half data in place: their peak memory is their output, not an f32 copy.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "optim/sgd.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const DType kHalfTypes[] = {kBFloat16, kFloat16};

// One rounding of an f32 result: half an ulp of the dtype relative, plus f32 noise.
double rtol_of(DType dt) {
  return dt == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}
void check_half(const Tensor& got, const std::vector<double>& want, double atol = 1e-5) {
  check_close(got, want, rtol_of(got.dtype()), atol);
}

// x:[R, K] (row-major values v) reduced over its last dim by f.
template <typename F>
std::vector<double> rows_ref(const std::vector<double>& v, int64_t R, int64_t K, F f) {
  std::vector<double> out(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r)
    out[size_t(r)] = f(std::vector<double>(v.begin() + r * K, v.begin() + (r + 1) * K));
  return out;
}
double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_var(const std::vector<double>& v) {
  const double m = ref_sum(v) / double(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(v.size() - 1);
}
double ref_lse(const std::vector<double>& v) {
  const double m = *std::max_element(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// Checks sum/mean/var/amax/logsumexp/max over the last dim of x [R, K] (given as any layout).
void check_reductions_last_dim(const Tensor& x, int64_t R, int64_t K, int64_t dim) {
  const std::vector<double> v = to_f64(x.dim() == 2 && dim == 0 ? x.t().contiguous() : x);
  check_half(sum(x, {dim}), rows_ref(v, R, K, ref_sum));
  check_half(mean(x, {dim}),
             rows_ref(v, R, K, [](auto r) { return ref_sum(r) / double(r.size()); }));
  check_half(var(x, {dim}), rows_ref(v, R, K, ref_var));
  check_half(logsumexp(x, {dim}), rows_ref(v, R, K, ref_lse));
  const auto mx = rows_ref(v, R, K, [](auto r) { return *std::max_element(r.begin(), r.end()); });
  check_close(amax(x, {dim}), mx, 0, 0);  // exact
  auto [values, indices] = max(x, dim);
  check_close(values, mx, 0, 0);
  const auto idx = rows_ref(v, R, K, [](auto r) {  // first occurrence of the maximum
    return double(std::max_element(r.begin(), r.end()) - r.begin());
  });
  check_close(indices, idx, 0, 0);
}

}  // namespace

TEST_CASE("half reductions match f64 on the row, column, permuted and chunked paths") {
  uint64_t seed = 300;
  for (DType dt : kHalfTypes) {
    INFO("dtype ", dtype_name(dt));
    // rows: contiguous [R, K] over the last dim; K > 32768 takes the chunked path
    for (auto [R, K] : {std::pair<int64_t, int64_t>{7, 33}, {3, 40000}}) {
      Tensor x = random_tensor({R, K}, dt, seed++);
      check_reductions_last_dim(x, R, K, 1);
    }
    // columns: [K, M] over dim 0 with M >= 16 (the column path reads elements one at a time),
    // and its transpose (a permuted copy in the half dtype)
    Tensor y = random_tensor({24, 40}, dt, seed++);
    check_reductions_last_dim(y, 40, 24, 0);
    check_reductions_last_dim(y.t(), 24, 40, 0);
  }
}

TEST_CASE("half reductions and add with alpha allocate only their outputs") {
  for (DType dt : kHalfTypes) {
    INFO("dtype ", dtype_name(dt));
    Tensor x = random_tensor({64, 16384}, dt, 11), y = random_tensor({64, 16384}, dt, 12);
    const int64_t xbytes = x.numel() * 2;  // 2 MiB; an f32 copy would be 4 MiB
    for (int64_t dim : {0, 1}) {
      reset_peak_memory_stats(kCPU);
      const int64_t base = memory_stats(kCPU).allocated;
      Tensor s = sum(x, {dim});
      // the output, its f64 accumulation buffer (with_out_buffer) and small per-task buffers
      CHECK(memory_stats(kCPU).peak - base <= s.numel() * (2 + 8) + (int64_t(1) << 18));
    }
    reset_peak_memory_stats(kCPU);
    const int64_t base = memory_stats(kCPU).allocated;
    Tensor z = add(x, y, 0.375);
    CHECK(memory_stats(kCPU).peak - base == xbytes);  // the output alone
    // a + alpha*b: b*alpha rounded to f32, the sum rounded once to the half dtype
    const std::vector<double> a = to_f64(x), b = to_f64(y), zv = to_f64(z);
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = float(a[i]) + float(b[i]) * 0.375f;
      const double got = zv[i];
      const double expect =
          dt == kBFloat16 ? double(float(BFloat16(want))) : double(float(Half(want)));
      bad += got != expect;
    }
    CHECK(bad == 0);
    // in place (the SGD/Adam update): the same values
    Tensor p = x.clone();
    add_(p, y, 0.375);
    CHECK(to_f64(p) == zv);
    check_half(z, [&] {
      std::vector<double> r(a.size());
      for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + 0.375 * b[i];
      return r;
    }());
  }
}

TEST_CASE("half softmax, log_softmax, layer_norm and cross_entropy match f64") {
  const int64_t R = 6, K = 37;
  uint64_t seed = 400;
  for (DType dt : kHalfTypes) {
    INFO("dtype ", dtype_name(dt));
    Tensor x = random_tensor({R, K}, dt, seed++);
    const std::vector<double> v = to_f64(x);
    std::vector<double> sm(v.size()), lsm(v.size()), ln(v.size());
    std::vector<double> ce(static_cast<size_t>(R));
    Tensor target = empty({R}, kInt64);
    for (int64_t r = 0; r < R; ++r) {
      const std::vector<double> row(v.begin() + r * K, v.begin() + (r + 1) * K);
      const double lse = ref_lse(row), m = ref_sum(row) / double(K);
      double var = 0;
      for (double e : row) var += (e - m) * (e - m);
      const double rstd = 1 / std::sqrt(var / double(K) + 1e-5);
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = size_t(r * K + k);
        sm[i] = std::exp(v[i] - lse);
        lsm[i] = v[i] - lse;
        ln[i] = (v[i] - m) * rstd;
      }
      const int64_t t = (r * 5) % K;
      target.data_ptr<int64_t>()[r] = t;
      ce[size_t(r)] = lse - v[size_t(r * K + t)];
    }
    check_half(softmax(x, 1), sm);
    // dim 0 of x^T (lines strided across the inner dim: the tiled column path)
    check_half(softmax(x.t().contiguous(), 0).t(), sm);
    check_half(log_softmax(x.t().contiguous(), 0).t(), lsm, 1e-4);
    check_half(log_softmax(x, 1), lsm, 1e-4);
    check_half(layer_norm(x, {K}).out, ln, 1e-3);
    check_half(cross_entropy(x, target, Reduction::none), ce, 1e-4);
    double mean_ce = 0;
    for (double c : ce) mean_ce += c / double(R);
    check_half(cross_entropy(x, target), {mean_ce}, 1e-4);
  }
}

TEST_CASE("SGD on bf16/f16 parameters: p + (-lr)*g in f32, one rounding, no f32 copies") {
  for (DType dt : kHalfTypes) {
    INFO("dtype ", dtype_name(dt));
    Tensor p = random_tensor({256, 1024}, dt, 21);
    Tensor g = random_tensor({256, 1024}, dt, 22);
    const std::vector<double> pv = to_f64(p), gv = to_f64(g);
    p.requires_grad_();
    p.mutable_grad() = g;
    optim::SGD opt({p}, 0.1);
    reset_peak_memory_stats(kCPU);
    const int64_t base = memory_stats(kCPU).allocated;
    opt.step();
    // the update's one half-precision temporary (add_ writes a + alpha*b, then copies it in)
    CHECK(memory_stats(kCPU).peak - base <= p.numel() * 2);
    const std::vector<double> nv = to_f64(p.detach());
    int bad = 0;
    for (size_t i = 0; i < pv.size(); ++i) {
      const float want = float(pv[i]) + float(gv[i]) * -0.1f;
      bad += nv[i] != (dt == kBFloat16 ? double(float(BFloat16(want))) : double(float(Half(want))));
    }
    CHECK(bad == 0);
  }
}
