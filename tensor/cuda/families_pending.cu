// Registration stubs for CUDA kernel families not yet written (each family file replaces
// its line here). Ops without a CUDA kernel throw "op `x` has no CUDA kernel".
#include "tensor/cuda/kernels.h"

namespace minidl::cuda {
void register_copy_kernels() {}
void register_unary_kernels() {}
void register_binary_kernels() {}
void register_reduce_kernels() {}
void register_softmax_kernels() {}
void register_linalg_kernels() {}
void register_conv_kernels() {}
void register_pool_kernels() {}
void register_norm_kernels() {}
void register_loss_kernels() {}
void register_index_kernels() {}
void register_random_kernels() {}
}  // namespace minidl::cuda
