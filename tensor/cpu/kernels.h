// Registration entry points of the CPU kernel families (one per tensor/cpu/*.cpp file).
#pragma once
#include <cstdint>

namespace minidl {
class Tensor;
}
namespace minidl::cpu {
void register_copy_kernels();     // copy, fill, arange            (copy.cpp)
void register_unary_kernels();    // unary math, clamp             (unary.cpp)
void register_binary_kernels();   // binary, comparisons, where    (binary.cpp)
void register_reduce_kernels();   // sum, mean, var, amax, ...     (reduce.cpp)
void register_softmax_kernels();  // softmax, log_softmax + bwd    (softmax.cpp)
void register_linalg_kernels();   // bmm                           (linalg.cpp)
void register_conv_kernels();     // conv2d fwd/bwd                (conv.cpp)
void register_pool_kernels();     // max/avg pool fwd/bwd          (pool.cpp)
void register_norm_kernels();     // layer_norm, batch_norm        (norm.cpp)
void register_loss_kernels();     // cross_entropy                 (loss.cpp)
void register_index_kernels();    // embedding, gather, scatter... (index.cpp)
void register_random_kernels();   // uniform, normal, ...          (random.cpp)
void register_amp_kernels();      // non_finite_check_and_unscale, amp_update_scale (amp.cpp)
void register_optim_kernels();    // fused_sgd, fused_adam       (optim.cpp)
// tril/triu, cumsum, div_trunc/div_floor, multinomial (scan_select.cpp)
void register_scan_select_kernels();
// scaled_dot_product_attention and its backward (attention.cpp)
void register_attention_kernels();

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
