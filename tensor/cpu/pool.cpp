// CPU kernels: pool family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_pool_kernels() {}
}  // namespace minidl::cpu
