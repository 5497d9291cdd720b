// Filling the kernel table (tensor/dispatch.h): each backend registers its kernels, once and
// lazily, on the first dispatch or the first CUDA allocation (tensor/storage.cpp). Defined in
// tensor/dispatch.cpp, tensor/cpu/register.cpp and tensor/cuda/ (a no-op without CUDA).
#pragma once

namespace minidl {

// Called once (lazily, on first dispatch) to fill the table; idempotent.
void register_cpu_kernels();
void register_cuda_kernels();  // no-op in CPU-only builds
void ensure_kernels_registered();

}  // namespace minidl
