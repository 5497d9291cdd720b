// CPU kernels: index family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_index_kernels() {}
}  // namespace minidl::cpu
