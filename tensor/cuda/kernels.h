// Registration entry points of the CUDA kernel families (one per tensor/cuda/*.cu file),
// mirroring tensor/cpu/kernels.h.
#pragma once

namespace minidl::cuda {
void register_copy_kernels();     // copy, fill, arange            (copy.cu)
void register_unary_kernels();    // unary math, clamp             (unary.cu)
void register_binary_kernels();   // binary, comparisons, where    (binary.cu)
void register_reduce_kernels();   // sum, mean, var, amax, ...     (reduce.cu)
void register_softmax_kernels();  // softmax, log_softmax + bwd    (softmax.cu)
void register_linalg_kernels();   // bmm via cuBLASLt              (linalg.cu)
void register_conv_kernels();     // conv2d fwd/bwd via cuDNN      (conv.cu)
void register_pool_kernels();     // max/avg pool fwd/bwd          (pool.cu)
void register_norm_kernels();     // layer_norm, batch_norm        (norm.cu)
void register_loss_kernels();     // cross_entropy                 (loss.cu)
void register_index_kernels();    // embedding, gather, scatter... (index.cu)
void register_random_kernels();   // uniform, normal, ...          (random.cu)
void register_amp_kernels();      // non_finite_check_and_unscale, amp_update_scale (amp.cu)
void register_optim_kernels();    // fused_sgd, fused_adam       (optim.cu)
// tril/triu, cumsum, div_trunc/div_floor, multinomial (scan_select.cu)
void register_scan_select_kernels();
// scaled_dot_product_attention and its backward (attention.cu)
void register_attention_kernels();
}  // namespace minidl::cuda
