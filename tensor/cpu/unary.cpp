// CPU kernels: unary family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_unary_kernels() {}
}  // namespace minidl::cpu
