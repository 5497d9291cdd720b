// CPU kernels: reduce family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_reduce_kernels() {}
}  // namespace minidl::cpu
