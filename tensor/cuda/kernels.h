// Registration entry points of the CUDA kernel families (one per tensor/cuda/*.cu file),
// mirroring tensor/cpu/kernels.h.
#pragma once

namespace minidl::cuda {
// register_<family>_kernels() of every family in tensor/kernel_families.def (<family>.cu).
#define MINIDL_KERNEL_FAMILY(family) void register_##family##_kernels();
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY
}  // namespace minidl::cuda
