// GroupNorm over the fused layer_norm op (one node for the statistics and their gradient)
// plus a broadcast per-channel affine transform.
#include "nn/group_norm.h"

#include "autograd/ops.h"
#include "nn/functional.h"

namespace minidl::nn {

namespace functional {

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  MINIDL_CHECK(x.defined(), "group_norm: undefined input");
  MINIDL_CHECK(x.dim() >= 2, "group_norm: expected an input of at least 2 dims [N, C, *], got ",
               "shape ", x.shape_str());
  MINIDL_CHECK(num_groups > 0, "group_norm: num_groups must be positive, got ", num_groups);
  const int64_t N = x.size(0), C = x.size(1);
  MINIDL_CHECK(C % num_groups == 0,
               "Expected number of channels in input to be divisible by num_groups, but got "
               "input of shape ",
               x.shape_str(), " and num_groups=", num_groups);
  for (const Tensor* t : {&weight, &bias})
    MINIDL_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == C), "group_norm: expected ",
                 t == &weight ? "weight" : "bias", " of shape [", C, "], got ", t->shape_str(),
                 " for input of shape ", x.shape_str());
  const int64_t per_group = x.numel() / std::max<int64_t>(N * num_groups, 1);
  Tensor out;
  if (x.numel() == 0) {
    out = mul(x, Scalar(1));
  } else {
    Tensor grouped = x.reshape({N, num_groups, per_group});  // [N, G, C/G * prod(*)]
    out = layer_norm(grouped, {per_group}, {}, {}, eps).out.reshape(x.shape());
  }
  if (!weight.defined() && !bias.defined()) return out;
  Shape cs(size_t(x.dim() - 1), 1);  // [C, 1, ...]: broadcasts over dim 1
  cs[0] = C;
  if (weight.defined()) out = mul(out, weight.reshape(cs));
  if (bias.defined()) out = add(out, bias.reshape(cs));
  return out;
}

}  // namespace functional

GroupNorm::GroupNorm(int64_t g, int64_t c, double eps_, bool affine_)
    : num_groups(g), num_channels(c), eps(eps_), affine(affine_) {
  MINIDL_CHECK(g > 0 && c > 0, "GroupNorm: num_groups and num_channels must be positive, got ", g,
               " and ", c);
  MINIDL_CHECK(c % g == 0, "num_channels must be divisible by num_groups (got num_channels=", c,
               ", num_groups=", g, ")");
  if (affine) {
    weight = ones({c});
    bias = zeros({c});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_channels, "GroupNorm: expected ",
               "an input [N, ", num_channels, ", *], got shape ",
               x.defined() ? x.shape_str() : std::string("(undefined)"));
  return functional::group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) +
         ", eps=" + py_float(eps) + ", affine=" + (affine ? "True" : "False");
}

}  // namespace minidl::nn
