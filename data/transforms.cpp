// Sample transforms: Normalize (per-channel, batched in one broadcast), RandomCrop with zero
// padding (torchvision semantics, offsets drawn from the given generator) and Compose.
#include "data/transforms.h"

#include <cmath>
#include <utility>

#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::data {

// x:[B, ...] -> stack(op(x[b]) for b), drawing from `gen` in batch order.
Tensor Transform::apply_batch(const Tensor& x, Generator& gen) const {
  MINIDL_CHECK(x.defined() && x.dim() >= 1, "Transform::apply_batch: expected a batch [B, ...]",
               x.defined() ? ", got shape " + x.shape_str() : std::string(", got undefined"));
  MINIDL_CHECK(x.size(0) > 0, "Transform::apply_batch: empty batch ", x.shape_str());
  std::vector<Tensor> out;
  out.reserve(size_t(x.size(0)));
  for (int64_t b = 0; b < x.size(0); ++b) out.push_back((*this)(x.select(0, b), gen));
  return stack(out, 0);
}

// ---- Normalize

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  MINIDL_CHECK(!mean_.empty() && !std_.empty(), "Normalize: mean and std must be non-empty");
  MINIDL_CHECK(mean_.size() == std_.size() || mean_.size() == 1 || std_.size() == 1,
               "Normalize: mean has ", mean_.size(), " values but std has ", std_.size());
  for (size_t c = 0; c < std_.size(); ++c)
    MINIDL_CHECK(std_[c] != 0 && std::isfinite(std_[c]), "Normalize: std[", c, "] = ", std_[c],
                 " (std must be finite and non-zero, division by zero)");
}

// x:[..., C, H, W]: (x - mean.view(C,1,1)) / std.view(C,1,1) like torchvision's F.normalize.
Tensor Normalize::operator()(const Tensor& x, Generator& /*gen*/) const {
  MINIDL_CHECK(x.defined() && x.dim() >= 3, "Normalize: expected x:[C,H,W] or [B,C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  MINIDL_CHECK(x.is_floating_point(), "Normalize: expected a floating point tensor, got dtype ",
               x.dtype());
  const int64_t channels = x.size(-3);
  for (const auto* v : {&mean_, &std_})
    MINIDL_CHECK(v->size() == 1 || int64_t(v->size()) == channels,
                 "Normalize: ", v == &mean_ ? "mean" : "std", " has ", v->size(), " values but x ",
                 x.shape_str(), " has ", channels, " channels");
  auto param = [&](const std::vector<double>& v) {
    return tensor<double>(v, Shape{int64_t(v.size()), 1, 1}).to(x.device(), x.dtype());
  };
  return div(sub(x, param(mean_)), param(std_));
}

Tensor Normalize::apply_batch(const Tensor& x, Generator& gen) const {
  MINIDL_CHECK(x.defined() && x.dim() >= 4, "Normalize::apply_batch: expected x:[B,C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  return (*this)(x, gen);
}

// ---- RandomCrop

RandomCrop::RandomCrop(int64_t size, int64_t padding) : size_(size), padding_(padding) {
  MINIDL_CHECK(size > 0, "RandomCrop: size must be positive, got ", size);
  MINIDL_CHECK(padding >= 0, "RandomCrop: padding must be non-negative, got ", padding);
}

// x:[..., H, W] -> [..., size, size]: the window at (top, left) of x zero-padded by `padding`,
// top uniform in [0, H + 2p - size], left uniform in [0, W + 2p - size] (torchvision's
// get_params; no draw when the padded image already has the crop size).
Tensor RandomCrop::operator()(const Tensor& x, Generator& gen) const {
  MINIDL_CHECK(x.defined() && x.dim() >= 2, "RandomCrop: expected x:[C,H,W], got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  const int64_t hd = x.dim() - 2, wd = x.dim() - 1;
  const int64_t h = x.size(hd), w = x.size(wd);
  const int64_t ph = h + 2 * padding_, pw = w + 2 * padding_;
  MINIDL_CHECK(ph >= size_ && pw >= size_, "RandomCrop: crop size (", size_, ", ", size_,
               ") is larger than the padded input (", ph, ", ", pw, ") of x ", x.shape_str());
  if (ph == size_ && pw == size_ && padding_ == 0) return x;
  int64_t top = 0, left = 0;
  if (ph != size_ || pw != size_) {
    PhiloxStream s = gen.reserve(1);
    top = int64_t(s.word(0) % uint64_t(ph - size_ + 1));
    left = int64_t(s.word(1) % uint64_t(pw - size_ + 1));
  }
  Shape out_shape = x.shape();
  out_shape[size_t(hd)] = size_;
  out_shape[size_t(wd)] = size_;
  Tensor out = zeros(out_shape, x.dtype(), x.device());
  // Window rows [top - p, top - p + size) in input coordinates, clipped to [0, h); same for cols.
  const int64_t r0 = top - padding_, c0 = left - padding_;
  const int64_t ir0 = std::max<int64_t>(r0, 0), ir1 = std::min(r0 + size_, h);
  const int64_t ic0 = std::max<int64_t>(c0, 0), ic1 = std::min(c0 + size_, w);
  if (ir1 > ir0 && ic1 > ic0) {
    out.narrow(hd, ir0 - r0, ir1 - ir0)
        .narrow(wd, ic0 - c0, ic1 - ic0)
        .copy_(x.narrow(hd, ir0, ir1 - ir0).narrow(wd, ic0, ic1 - ic0));
  }
  return out;
}

// ---- Compose

Compose::Compose(std::vector<std::shared_ptr<const Transform>> transforms)
    : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    MINIDL_CHECK(transforms_[i] != nullptr, "Compose: transform ", i, " is null");
}

Tensor Compose::operator()(const Tensor& x, Generator& gen) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = (*t)(y, gen);
  return y;
}

Tensor Compose::apply_batch(const Tensor& x, Generator& gen) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = t->apply_batch(y, gen);
  return y;
}

}  // namespace minidl::data
