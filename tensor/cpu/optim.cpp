// CPU kernels of the fused optimizer ops (fused_sgd, fused_adam): the per-tensor update formulas
// of tensor/update_rules.h, one dispatch for a whole group; with AMP inputs the grads are divided
// by grad_scale and a set found_inf skips everything. And clip_grad_norm_'s two list ops,
// foreach_norm and foreach_clip_by_norm.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"
#include "tensor/update_rules.h"

namespace minidl::cpu {
namespace {

// True when the step is to be skipped; *scale: the divisor of the grads (1: none).
bool amp_inputs(const FusedAmpArgs& amp, double* scale) {
  *scale = amp.grad_scale.defined() ? double(*static_cast<const float*>(amp.grad_scale.data_ptr()))
                                    : 1.0;
  return amp.found_inf.defined() && *static_cast<const float*>(amp.found_inf.data_ptr()) != 0.0f;
}

Tensor unscaled(const Tensor& g, double scale) {
  return scale == 1.0 ? g : native::div(g, scale);
}

void fused_sgd_kernel(const FusedSgdArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return;
  const std::array<double, 8> h = a.hyper->read();
  const update_rules::SgdHyper hyper{h[0], h[1], h[2], h[3], a.nesterov};
  for (size_t i = 0; i < a.params.size(); ++i)
    update_rules::sgd(a.params[i], unscaled(a.grads[i], scale),
                      a.bufs.empty() ? Tensor() : a.bufs[i], !a.bufs.empty() && a.first[i], hyper);
}

// copies[i] = params[i] converted, for the defined copies.
void copy_params(const std::vector<Tensor>& copies, const std::vector<Tensor>& params) {
  for (size_t i = 0; i < copies.size(); ++i)
    if (copies[i].defined()) native::copy_(copies[i], native::view(params[i], copies[i].shape()));
}

void fused_adam_kernel(const FusedAdamArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return copy_params(a.param_copies, a.params);
  const std::array<double, 8> h = a.hyper->read();
  const update_rules::AdamHyper hyper{h[0], h[1], h[2], h[3], h[4], a.decoupled};
  const bool amsgrad = !a.max_exp_avg_sq.empty();
  for (size_t i = 0; i < a.params.size(); ++i) {
    const Tensor& step = a.steps[i];
    const double t = *static_cast<const double*>(step.data_ptr()) + 1;
    native::fill_(step, t);
    const Tensor copy = a.param_copies.empty() ? Tensor() : a.param_copies[i];
    update_rules::adam(a.params[i], unscaled(a.grads[i], scale), a.exp_avg[i], a.exp_avg_sq[i],
                       amsgrad ? a.max_exp_avg_sq[i] : Tensor(), t, hyper,
                       copy.defined() ? native::view(copy, a.params[i].shape()) : copy);
  }
}

// One chunk of a tensor list: elements [begin, end) of tensor `tensor`.
struct Chunk {
  size_t tensor;
  int64_t begin, end;
};
constexpr int64_t kNormChunk = 65536;

// sum f(x[i]) over [b, e) in f64, in kLanes independent partial sums (added pairwise at the
// end): one accumulator made every add wait for the previous one (~4 cycles an element); the
// lanes vectorise and the pass runs at memory speed. Deterministic: the order is fixed.
constexpr int kLanes = 8;
template <typename T, typename F>
double lane_sum(const T* x, int64_t b, int64_t e, F f) {
  double lane[kLanes] = {};
  int64_t i = b;
  for (; i + kLanes <= e; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += f(double(x[i + j]));
  for (; i < e; ++i) lane[0] += f(double(x[i]));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
  return lane[0];
}

// sum |x|^p (or max |x| when p is inf) over x[b, e) in f64.
template <typename T>
double chunk_norm(const T* x, int64_t b, int64_t e, double p) {
  double acc = 0;
  if (std::isinf(p)) {
    for (int64_t i = b; i < e; ++i) {
      const double a = std::abs(double(x[i]));
      acc = std::isnan(a) || std::isnan(acc) ? std::numeric_limits<double>::quiet_NaN()
                                             : std::max(acc, a);
    }
  } else if (p == 2.0) {
    acc = lane_sum(x, b, e, [](double v) { return v * v; });
  } else if (p == 1.0) {
    acc = lane_sum(x, b, e, [](double v) { return std::abs(v); });
  } else {
    for (int64_t i = b; i < e; ++i) acc += std::pow(std::abs(double(x[i])), p);
  }
  return acc;
}

void foreach_norm_kernel(const std::vector<Tensor>& tensors, double p, Tensor& out) {
  std::vector<Tensor> dense;
  std::vector<Chunk> chunks;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    dense.push_back(t.is_contiguous() ? t : native::contiguous(t));
    for (int64_t b = 0; b < t.numel(); b += kNormChunk)
      chunks.push_back({dense.size() - 1, b, std::min(t.numel(), b + kNormChunk)});
  }
  std::vector<double> partial(chunks.size());
  parallel_for(int64_t(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& k = chunks[size_t(c)];
      const Tensor& t = dense[k.tensor];
      dispatch_floating(t.dtype(), "foreach_norm", [&]<typename T>() {
        partial[size_t(c)] = chunk_norm(static_cast<const T*>(t.data_ptr()), k.begin, k.end, p);
      });
    }
  });
  const bool inf = std::isinf(p);
  double total = 0;
  for (double v : partial)
    total = !inf ? total + v
                 : (std::isnan(v) || std::isnan(total) ? std::numeric_limits<double>::quiet_NaN()
                                                       : std::max(total, v));
  if (!inf) total = std::pow(total, 1.0 / p);
  *static_cast<double*>(out.data_ptr()) = total;
}

void foreach_clip_by_norm_kernel(const std::vector<Tensor>& tensors, const Tensor& total,
                                 double max_norm) {
  const double coef = max_norm / (*static_cast<const double*>(total.data_ptr()) + 1e-6);
  if (coef >= 1) return;  // nothing to clip (a NaN total goes on: the grads become NaN)
  for (const Tensor& t0 : tensors) {
    if (t0.numel() == 0) continue;
    Tensor t = t0.is_contiguous() ? t0 : native::contiguous(t0);
    dispatch_floating(t.dtype(), "foreach_clip_by_norm", [&]<typename T>() {
      using C = opmath_t<T>;
      T* x = static_cast<T*>(t.data_ptr());
      const C s = C(coef);
      parallel_for(t.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) x[i] = static_cast<T>(C(x[i]) * s);
      });
    });
    if (!t.is_same(t0)) {
      Tensor dst = t0;
      native::copy_(dst, t);
    }
  }
}

// dst[i] = src[i] converted: the copy kernel per pair (one dispatch for the list).
void foreach_copy_kernel(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  for (size_t i = 0; i < dst.size(); ++i) native::copy_(dst[i], src[i]);
}

}  // namespace

void register_optim_kernels() {
  register_kernel<Op::foreach_copy>(DeviceType::cpu, foreach_copy_kernel);
  register_kernel<Op::fused_sgd>(DeviceType::cpu, fused_sgd_kernel);
  register_kernel<Op::fused_adam>(DeviceType::cpu, fused_adam_kernel);
  register_kernel<Op::foreach_norm>(DeviceType::cpu, foreach_norm_kernel);
  register_kernel<Op::foreach_clip_by_norm>(DeviceType::cpu, foreach_clip_by_norm_kernel);
}

}  // namespace minidl::cpu
