// CPU kernels: loss family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_loss_kernels() {}
}  // namespace minidl::cpu
