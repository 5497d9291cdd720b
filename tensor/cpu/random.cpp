// CPU kernels: random family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_random_kernels() {}
}  // namespace minidl::cpu
