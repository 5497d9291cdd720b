// CPU kernels: norm family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_norm_kernels() {}
}  // namespace minidl::cpu
