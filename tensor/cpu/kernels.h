// Registration entry points of the CPU kernel families (one per tensor/cpu/*.cpp file).
#pragma once
#include <cstdint>

namespace minidl {
class Tensor;
}
namespace minidl::cpu {
// register_<family>_kernels() of every family in tensor/kernel_families.def (<family>.cpp).
#define MINIDL_KERNEL_FAMILY(family) void register_##family##_kernels();
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY

// out = a + alpha*b for f16/bf16 a, b, out of one shape (any strides): f32 per element, one
// rounding at the store, no f32 copy of the operands (the CPU path of add/add_ with alpha).
void add_scaled_reduced(const Tensor& a, const Tensor& b, float alpha, Tensor& out);

// Bytes of conv2d im2col / conversion buffers all CPU workers together may hold (a worker
// needs at least one image's worth, so a single worker may exceed a tiny budget). Tests shrink
// it to check that the result does not depend on it.
inline constexpr int64_t kConvWorkspaceBudget = int64_t(32) << 20;
void set_conv_workspace_budget(int64_t bytes);
int64_t conv_workspace_budget();
}  // namespace minidl::cpu
