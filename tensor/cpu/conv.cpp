// CPU kernels: conv family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_conv_kernels() {}
}  // namespace minidl::cpu
