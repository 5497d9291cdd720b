// A two-layer MLP as plain tensors, shared by the autocast weight-copy tests
// (test_autocast_weight_copies.cpp, test_optimizer_weight_copies.cpp).
#pragma once
#include <vector>

#include "test_util.h"

namespace testutil {

// The parameters w1:[16,8] b1:[16] w2:[4,16] b2:[4], f32 leaves that require grad.
inline std::vector<minidl::Tensor> mlp_params(uint64_t seed) {
  using minidl::kFloat32;
  return {random_tensor({16, 8}, kFloat32, seed).requires_grad_(),
          random_tensor({16}, kFloat32, seed + 1).requires_grad_(),
          random_tensor({4, 16}, kFloat32, seed + 2).requires_grad_(),
          random_tensor({4}, kFloat32, seed + 3).requires_grad_()};
}

// x:[N,8] -> [N,4]: linear, relu, linear.
inline minidl::Tensor mlp(const std::vector<minidl::Tensor>& p, const minidl::Tensor& x) {
  return minidl::linear(minidl::relu(minidl::linear(x, p[0], p[1])), p[2], p[3]);
}

}  // namespace testutil
