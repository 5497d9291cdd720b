// CPU kernels: binary family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_binary_kernels() {}
}  // namespace minidl::cpu
