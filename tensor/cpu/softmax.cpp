// CPU kernels: softmax family (placeholder until implemented).
#include "tensor/cpu/kernels.h"

namespace minidl::cpu {
void register_softmax_kernels() {}
}  // namespace minidl::cpu
