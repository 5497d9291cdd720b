// Apex-style opt levels (see amp.h): model casting, fp32 master weights for O2, loss scaling
// through GradScaler, and the AMP state that training checkpoints carry.
#include "optim/amp.h"

#include <cstdio>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "tensor/cuda_api.h"
#include "autograd/ops.h"

namespace minidl::amp {
namespace {

bool is_half(DType t) {
  return t == kFloat16 || t == kBFloat16;
}

Device model_device(const nn::Module& model) {
  for (const Tensor& p : model.parameters())
    if (p.defined()) return p.device();
  return kCPU;
}

// Casts the floating parameters and buffers of every module except normalisation layers (when
// keep_norm) to `dtype`, in place (tensor identities kept, as Module::to does).
void cast_model(nn::Module& model, DType dtype, bool keep_norm) {
  for (const auto& [name, m] : model.named_modules()) {
    if (keep_norm && is_norm_layer(*m)) continue;
    m->to_own(dtype);
  }
}

}  // namespace

OptLevel parse_opt_level(std::string_view s) {
  if (s == "O0") return OptLevel::O0;
  if (s == "O1") return OptLevel::O1;
  if (s == "O2") return OptLevel::O2;
  if (s == "O3") return OptLevel::O3;
  MINIDL_FAIL("amp: opt level must be O0, O1, O2 or O3 (letter O, digit), got '", s, "'");
}

std::string_view opt_level_name(OptLevel level) {
  static constexpr std::string_view names[] = {"O0", "O1", "O2", "O3"};
  return names[int(level)];
}

bool is_norm_layer(const nn::Module& m) {
  const std::string n = m.name();
  return n == "BatchNorm1d" || n == "BatchNorm2d" || n == "SyncBatchNorm" || n == "LayerNorm" ||
         n == "GroupNorm" || n == "RMSNorm";
}

Amp::Amp(nn::Module& model, optim::Optimizer& opt, AmpOptions options)
    : model_(model), optimizer_(opt), opt_(options), device_(model_device(model)), scaler_([&] {
        GradScalerOptions so = options.scaler;
        // Dynamic loss scaling only where fp16 gradients can underflow: O1/O2 with fp16.
        so.enabled = so.enabled && options.dtype == kFloat16 &&
                     (options.opt_level == OptLevel::O1 || options.opt_level == OptLevel::O2);
        return so;
      }()) {
  MINIDL_CHECK(is_half(opt_.dtype), "amp.initialize: dtype must be float16 or bfloat16, got ",
               dtype_name(opt_.dtype));
  if (device_.is_cuda() && opt_.dtype == kBFloat16 && opt_.opt_level != OptLevel::O0) {
    const auto props = cuda::get_device_properties(device_.index);
    MINIDL_CHECK(props.major >= 8, "amp: bfloat16 needs a GPU of compute capability 8.0 or newer; ",
                 device_.str(), " (", props.name, ") is ", props.major, ".", props.minor,
                 ": use --amp fp16");
  }
  for (const auto& g : optimizer_.param_groups())
    for (const Tensor& p : g.params)
      MINIDL_CHECK(p.dtype() == kFloat32,
                   "amp.initialize: the model must be fp32 before "
                   "initialize (a parameter has dtype ",
                   dtype_name(p.dtype()), ")");
  if (opt_.opt_level == OptLevel::O2) {
    // fp32 masters from the exact fp32 weights, then the model goes half (norms stay fp32) and
    // the optimizer steps the masters instead of the model's parameters.
    std::unordered_map<const void*, Tensor> master_of;
    std::vector<Tensor> before = model_.parameters();
    std::vector<bool> norm(before.size(), false);
    {
      std::unordered_map<const void*, bool> in_norm;
      for (const auto& [name, m] : model_.named_modules())
        if (opt_.keep_norm_fp32 && is_norm_layer(*m))
          for (const Tensor& p : m->parameters()) in_norm[p.impl()] = true;
      for (size_t i = 0; i < before.size(); ++i) norm[i] = in_norm.count(before[i].impl()) > 0;
    }
    for (size_t i = 0; i < before.size(); ++i) {
      if (norm[i] || !before[i].is_floating_point()) continue;
      Tensor m = before[i].detach().clone();
      m.requires_grad_(before[i].requires_grad());
      master_of[before[i].impl()] = m;
      model_params_.push_back(before[i]);
      master_.push_back(m);
    }
    cast_model(model_, opt_.dtype, opt_.keep_norm_fp32);
    for (auto& g : optimizer_.param_groups())
      for (Tensor& p : g.params) {
        auto it = master_of.find(p.impl());
        if (it != master_of.end()) p = it->second;
      }
  } else if (opt_.opt_level == OptLevel::O3) {
    cast_model(model_, opt_.dtype, /*keep_norm=*/false);
    if (opt_.dtype == kFloat16) warn_fp16_without_scaler("amp O3 (loss scale 1, may diverge)");
  }
}

DType Amp::model_dtype() const {
  return (opt_.opt_level == OptLevel::O2 || opt_.opt_level == OptLevel::O3) ? opt_.dtype : kFloat32;
}

autocast Amp::autocast_region() const {
  return autocast(device_.type, opt_.dtype, opt_.opt_level == OptLevel::O1);
}

Tensor Amp::cast_input(const Tensor& x) const {
  const DType md = model_dtype();
  return (x.defined() && x.is_floating_point() && x.dtype() != md) ? x.to(md) : x;
}

Tensor Amp::cast_output(const Tensor& y) const {
  return (y.defined() && is_half(y.dtype()) && model_dtype() != kFloat32) ? y.to(kFloat32) : y;
}

Tensor Amp::forward(nn::Module& model, const Tensor& x) const {
  return forward(model, std::vector<Tensor>{x});
}

Tensor Amp::forward(nn::Module& model, const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> cast;
  cast.reserve(inputs.size());
  for (const Tensor& x : inputs) cast.push_back(cast_input(x));
  return cast_output(model.call(std::move(cast)));
}

void Amp::backward(const Tensor& loss) {
  scale_loss(loss).backward();
}

void Amp::master_grads_from_model() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < master_.size(); ++i) {
    const Tensor g = model_params_[i].grad();
    if (!g.defined()) continue;  // a parameter without a grad this step stays without one
    Tensor& mg = master_[i].mutable_grad();
    if (mg.defined() && mg.shape() == g.shape())
      mg.copy_(g);
    else
      master_[i].set_grad(g.to(kFloat32).contiguous());
    model_params_[i].set_grad(Tensor());  // consumed: the next backward starts from none
  }
}

Tensor Amp::clip_grad_norm_(double max_norm, double norm_type) {
  master_grads_from_model();
  return scaler_.clip_grad_norm_(optimizer_, max_norm, norm_type);
}

bool Amp::step() {
  master_grads_from_model();
  const bool applied = scaler_.step(optimizer_);
  scaler_.update();
  if (applied && !master_.empty()) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < master_.size(); ++i) model_params_[i].copy_(master_[i]);
  }
  return applied;
}

void Amp::reset_masters_from_model() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < master_.size(); ++i) master_[i].copy_(model_params_[i]);
}

std::map<std::string, Tensor> Amp::state_dict() const {
  std::map<std::string, Tensor> sd;
  sd["opt_level"] = scalar_tensor(int64_t(opt_.opt_level), kInt64);
  sd["dtype"] = scalar_tensor(int64_t(opt_.dtype), kInt64);
  for (const auto& [k, v] : scaler_.state_dict()) sd["scaler." + k] = v;
  for (size_t i = 0; i < master_.size(); ++i)
    sd["master." + std::to_string(i)] = master_[i].detach();
  return sd;
}

void Amp::load_state_dict(const std::map<std::string, Tensor>& sd) {
  auto level = sd.find("opt_level");
  auto dt = sd.find("dtype");
  MINIDL_CHECK(level != sd.end() && dt != sd.end(),
               "amp.load_state_dict: missing opt_level/dtype (not an AMP state)");
  const int64_t saved_level = level->second.item<int64_t>();
  const int64_t saved_dtype = dt->second.item<int64_t>();
  MINIDL_CHECK(saved_level == int64_t(opt_.opt_level) && saved_dtype == int64_t(opt_.dtype),
               "amp.load_state_dict: the state was saved at opt level ",
               saved_level >= 0 && saved_level < 4 ? opt_level_name(OptLevel(saved_level)) : "?",
               " with ", dtype_name(DType(saved_dtype)), ", this run uses ",
               opt_level_name(opt_.opt_level), " with ", dtype_name(opt_.dtype));
  std::map<std::string, Tensor> scaler_sd;
  size_t masters = 0;
  for (const auto& [k, v] : sd) {
    if (k.rfind("scaler.", 0) == 0) scaler_sd[k.substr(7)] = v;
    if (k.rfind("master.", 0) == 0) ++masters;
  }
  MINIDL_CHECK(masters == master_.size(), "amp.load_state_dict: ", masters,
               " master weights saved, this model has ", master_.size());
  for (size_t i = 0; i < master_.size(); ++i) {
    auto it = sd.find("master." + std::to_string(i));
    MINIDL_CHECK(it != sd.end(), "amp.load_state_dict: missing master.", i);
    MINIDL_CHECK(it->second.shape() == master_[i].shape(), "amp.load_state_dict: master.", i,
                 " has shape ", it->second.shape_str(), ", expected ", master_[i].shape_str());
  }
  if (scaler_.is_enabled()) scaler_.load_state_dict(scaler_sd);
  NoGradGuard no_grad;
  for (size_t i = 0; i < master_.size(); ++i)
    master_[i].copy_(sd.at("master." + std::to_string(i)));
}

std::unique_ptr<Amp> initialize(nn::Module& model, optim::Optimizer& opt, AmpOptions options) {
  return std::make_unique<Amp>(model, opt, options);
}

std::unique_ptr<Amp> initialize(nn::Module& model, optim::Optimizer& opt,
                                std::string_view opt_level, DType dtype) {
  AmpOptions o;
  o.opt_level = parse_opt_level(opt_level);
  o.dtype = dtype;
  return initialize(model, opt, o);
}

}  // namespace minidl::amp
