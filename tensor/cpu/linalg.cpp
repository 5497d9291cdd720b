// CPU kernels: linalg family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_linalg_kernels() {}
}  // namespace minidl::cpu
