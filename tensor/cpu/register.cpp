// Fills the CPU column of the kernel table (explicit calls: static registration objects
// would be dropped from a static library).
#include "tensor/cpu/kernels.h"
#include "tensor/dispatch.h"

namespace minidl {

void register_cpu_kernels() {
  cpu::register_copy_kernels();
  cpu::register_unary_kernels();
  cpu::register_binary_kernels();
  cpu::register_reduce_kernels();
  cpu::register_softmax_kernels();
  cpu::register_linalg_kernels();
  cpu::register_conv_kernels();
  cpu::register_pool_kernels();
  cpu::register_norm_kernels();
  cpu::register_loss_kernels();
  cpu::register_index_kernels();
  cpu::register_random_kernels();
  cpu::register_amp_kernels();
  cpu::register_optim_kernels();
  cpu::register_scan_select_kernels();
  cpu::register_attention_kernels();
}

}  // namespace minidl
