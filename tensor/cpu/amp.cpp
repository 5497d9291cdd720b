// CPU kernels of the AMP ops: non_finite_check_and_unscale (one pass per gradient: check for
// inf/NaN, multiply by inv_scale in place) and amp_update_scale (GradScaler.update's rule).
#include <atomic>
#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

// Contiguous data: x = x * inv (opmath: f32 for f16/bf16, f64 for f64), returns whether any
// element was non-finite before the multiplication.
template <typename T>
bool unscale_contiguous(T* x, int64_t n, float inv) {
  using C = opmath_t<T>;
  std::atomic<bool> bad{false};
  parallel_for(n, 32768, [&](int64_t b, int64_t e) {
    bool local = false;
    if (inv == 1.0f) {
      for (int64_t i = b; i < e; ++i) local |= !std::isfinite(C(x[i]));
    } else {
      const C s = C(inv);
      for (int64_t i = b; i < e; ++i) {
        const C v = C(x[i]);
        local |= !std::isfinite(v);
        x[i] = static_cast<T>(v * s);
      }
    }
    if (local) bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
}

void non_finite_check_and_unscale_kernel(const std::vector<Tensor>& grads, Tensor& found_inf,
                                         const Tensor& inv_scale) {
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  bool bad = false;
  for (const Tensor& g0 : grads) {
    if (g0.numel() == 0) continue;
    // Strided gradients go through a contiguous copy written back afterwards.
    Tensor g = g0.is_contiguous() ? g0 : native::contiguous(g0);
    dispatch_floating(g.dtype(), "non_finite_check_and_unscale", [&]<typename T>() {
      bad |= unscale_contiguous(static_cast<T*>(g.data_ptr()), g.numel(), inv);
    });
    if (!g.is_same(g0) && inv != 1.0f) {
      Tensor dst = g0;
      native::copy_(dst, g);
    }
  }
  if (bad) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void amp_update_scale_kernel(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  float* s = static_cast<float*>(scale.data_ptr());
  int32_t* tracker = static_cast<int32_t*>(growth_tracker.data_ptr());
  if (*static_cast<const float*>(found_inf.data_ptr()) != 0.0f) {
    *s = static_cast<float>(double(*s) * backoff_factor);
    *tracker = 0;
    return;
  }
  const int32_t successful = *tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(double(*s) * growth_factor);
    if (std::isfinite(grown)) *s = grown;  // growth that would overflow is skipped
    *tracker = 0;
  } else {
    *tracker = successful;
  }
}

}  // namespace

void register_amp_kernels() {
  register_kernel<Op::non_finite_check_and_unscale>(DeviceType::cpu,
                                                    non_finite_check_and_unscale_kernel);
  register_kernel<Op::amp_update_scale>(DeviceType::cpu, amp_update_scale_kernel);
}

}  // namespace minidl::cpu
