// torch.nn.GroupNorm and F::group_norm: normalises each group of channels of x:[N,C,*] over
// (C/G, *), then applies a per-channel affine transform (weight ones, bias zeros).
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

namespace functional {
// x:[N,C,*] with C % num_groups == 0; weight/bias:[C] or undefined. The group statistics are
// the fused layer_norm op's over [N, G, C/G * prod(*)] (biased variance, as torch).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
}  // namespace functional

// Named options like LayerNormOptions / BatchNormOptions: GroupNorm(8, 64, {.eps = 1e-6}).
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};

class GroupNorm : public Cloneable<GroupNorm> {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
      : GroupNorm(num_groups, num_channels, options.eps, options.affine) {}
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;  // "2, 6, eps=1e-05, affine=True"
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;
};

}  // namespace minidl::nn
