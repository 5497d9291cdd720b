// Frontends of the AMP ops (non_finite_check_and_unscale, amp_update_scale) and the fused
// optimizer steps (fused_sgd, fused_adam) and clipping (foreach_norm, foreach_clip_by_norm):
// argument checks naming shapes, dtypes and devices, then a single dispatch to the kernel of the
// tensors' device.
#include "optim/fused.h"

#include <cmath>

#include "tensor/error.h"

namespace minidl::amp {

static void check_scalar_f32(const Tensor& t, const char* op, const char* what, Device dev) {
  MINIDL_CHECK(t.defined() && t.numel() == 1 && t.dtype() == kFloat32 && t.device() == dev, op,
               ": ", what, " must be a one-element f32 tensor on ", dev, " (got ",
               t.defined() ? t.shape_str() : std::string("undefined"), " ",
               t.defined() ? std::string(dtype_name(t.dtype())) : std::string(), ")");
}

void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                   const Tensor& inv_scale) {
  const char* op = "non_finite_check_and_unscale_";
  MINIDL_CHECK(found_inf.defined(), op, ": found_inf is undefined");
  const Device dev = found_inf.device();
  check_scalar_f32(found_inf, op, "found_inf", dev);
  check_scalar_f32(inv_scale, op, "inv_scale", dev);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    MINIDL_CHECK(g.defined(), op, ": tensor ", i, " is undefined");
    MINIDL_CHECK(g.device() == dev, op, ": tensor ", i, " is on ", g.device(),
                 " but found_inf is on ", dev);
    MINIDL_CHECK(g.is_floating_point(), op, ": tensor ", i, " has dtype ", g.dtype(),
                 "; expected a floating dtype");
  }
  kernel<Op::non_finite_check_and_unscale>(dev)(grads, found_inf, inv_scale);
}

Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "amp_update_scale_";
  MINIDL_CHECK(scale.defined(), op, ": scale is undefined");
  const Device dev = scale.device();
  check_scalar_f32(scale, op, "scale", dev);
  check_scalar_f32(found_inf, op, "found_inf", dev);
  MINIDL_CHECK(growth_tracker.defined() && growth_tracker.numel() == 1 &&
                   growth_tracker.dtype() == kInt32 && growth_tracker.device() == dev,
               op, ": growth_tracker must be a one-element int32 tensor on ", dev);
  MINIDL_CHECK(growth_interval > 0, op, ": growth_interval must be positive (got ", growth_interval,
               ")");
  kernel<Op::amp_update_scale>(dev)(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                    growth_interval);
  return scale;
}

}  // namespace minidl::amp

namespace minidl::optim::fused {

HyperHandle make_hyper(std::function<HyperValues()> read) {
  auto h = std::make_shared<FusedHyper>();
  h->read = std::move(read);
  return h;
}

bool usable(const std::vector<Tensor>& params, bool allow_cpu) {
  if (params.empty()) return false;
  const Device dev = params[0].device();
  for (const Tensor& p : params) {
    if (!p.defined() || !(p.is_cuda() || allow_cpu) || p.device() != dev ||
        !p.is_floating_point() || !p.is_contiguous())
      return false;
    const Tensor& g = p.grad();
    if (!g.defined() || g.device() != dev || g.dtype() != p.dtype() || g.shape() != p.shape() ||
        !g.is_contiguous())
      return false;
  }
  return true;
}

namespace {

void check_state(const std::vector<Tensor>& state, const std::vector<Tensor>& params,
                 const char* op, const char* what) {
  MINIDL_CHECK(state.size() == params.size(), op, ": ", state.size(), " ", what, " tensor(s) for ",
               params.size(), " parameter(s)");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& s = state[i];
    const Tensor& p = params[i];
    MINIDL_CHECK(s.defined() && s.device() == p.device() && s.dtype() == p.dtype() &&
                     s.shape() == p.shape() && s.is_contiguous(),
                 op, ": ", what, " ", i, " must be a contiguous ", p.dtype(), " tensor of shape ",
                 p.shape_str(), " on ", p.device());
  }
}

void check_common(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::shared_ptr<FusedHyper>& hyper, const FusedAmpArgs& amp,
                  const char* op) {
  MINIDL_CHECK(hyper && hyper->read, op, ": no hyper-parameter handle");
  const Device dev = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    MINIDL_CHECK(p.defined() && p.device() == dev && p.is_floating_point() && p.is_contiguous(), op,
                 ": parameter ", i, " must be a contiguous floating tensor on ", dev);
  }
  check_state(grads, params, op, "grad");
  for (const Tensor* t : {&amp.grad_scale, &amp.found_inf})
    if (t->defined())
      MINIDL_CHECK(t->numel() == 1 && t->dtype() == kFloat32 && t->device() == dev, op,
                   ": grad_scale/found_inf must be one-element f32 tensors on ", dev, " (got ",
                   t->shape_str(), " ", t->dtype(), " on ", t->device(), ")");
}

}  // namespace

void sgd_step(const FusedSgdArgs& a) {
  if (a.params.empty()) return;
  const char* op = "fused_sgd";
  check_common(a.params, a.grads, a.hyper, a.amp, op);
  const bool momentum = !a.bufs.empty();
  if (momentum) check_state(a.bufs, a.params, op, "momentum_buffer");
  MINIDL_CHECK(!momentum || a.first.size() == a.params.size(), op, ": ", a.first.size(),
               " first-step flags for ", a.params.size(), " parameter(s)");
  kernel<Op::fused_sgd>(a.params[0].device())(a);
}

void adam_step(const FusedAdamArgs& a) {
  if (a.params.empty()) return;
  const char* op = "fused_adam";
  check_common(a.params, a.grads, a.hyper, a.amp, op);
  check_state(a.exp_avg, a.params, op, "exp_avg");
  check_state(a.exp_avg_sq, a.params, op, "exp_avg_sq");
  if (!a.max_exp_avg_sq.empty()) check_state(a.max_exp_avg_sq, a.params, op, "max_exp_avg_sq");
  MINIDL_CHECK(a.steps.size() == a.params.size(), op, ": ", a.steps.size(), " step tensor(s) for ",
               a.params.size(), " parameter(s)");
  for (size_t i = 0; i < a.steps.size(); ++i)
    MINIDL_CHECK(a.steps[i].defined() && a.steps[i].numel() == 1 &&
                     a.steps[i].dtype() == kFloat64 && a.steps[i].device() == a.params[i].device(),
                 op, ": step ", i, " must be a one-element f64 tensor on ", a.params[i].device());
  MINIDL_CHECK(a.param_copies.empty() || a.param_copies.size() == a.params.size(), op, ": ",
               a.param_copies.size(), " parameter copies for ", a.params.size(), " parameter(s)");
  for (size_t i = 0; i < a.param_copies.size(); ++i) {
    const Tensor& c = a.param_copies[i];
    const Tensor& p = a.params[i];
    MINIDL_CHECK(!c.defined() || (c.device() == p.device() && c.is_floating_point() &&
                                  c.is_contiguous() && c.numel() == p.numel()),
                 op, ": parameter copy ", i, " must be a contiguous floating tensor of ", p.numel(),
                 " elements on ", p.device(), " (got ", c.shape_str(), " ",
                 c.defined() ? std::string(dtype_name(c.dtype())) : std::string(), " on ",
                 c.defined() ? c.device().str() : std::string(), ")");
  }
  kernel<Op::fused_adam>(a.params[0].device())(a);
}

namespace {

void check_list(const std::vector<Tensor>& tensors, const char* op) {
  MINIDL_CHECK(!tensors.empty(), op, ": an empty tensor list");
  const Device dev = tensors[0].device();
  for (size_t i = 0; i < tensors.size(); ++i)
    MINIDL_CHECK(
        tensors[i].defined() && tensors[i].is_floating_point() && tensors[i].device() == dev, op,
        ": tensor ", i, " must be a floating tensor on ", dev, " like tensor 0 (got ",
        tensors[i].defined()
            ? tensors[i].shape_str() + " " + std::string(dtype_name(tensors[i].dtype())) + " on " +
                  tensors[i].device().str()
            : std::string("undefined"),
        ")");
}

}  // namespace

Tensor foreach_norm(const std::vector<Tensor>& tensors, double norm_type) {
  check_list(tensors, "foreach_norm");
  MINIDL_CHECK(norm_type > 0 || std::isinf(norm_type),
               "foreach_norm: norm_type must be positive or inf, got ", norm_type);
  Tensor out = empty({}, kFloat64, tensors[0].device());
  kernel<Op::foreach_norm>(out.device())(tensors, norm_type, out);
  return out;
}

void foreach_clip_by_norm_(const std::vector<Tensor>& tensors, const Tensor& total,
                           double max_norm) {
  check_list(tensors, "foreach_clip_by_norm");
  MINIDL_CHECK(total.defined() && total.numel() == 1 && total.dtype() == kFloat64 &&
                   total.device() == tensors[0].device(),
               "foreach_clip_by_norm: total must be a one-element f64 tensor on ",
               tensors[0].device());
  kernel<Op::foreach_clip_by_norm>(total.device())(tensors, total, max_norm);
}

}  // namespace minidl::optim::fused
