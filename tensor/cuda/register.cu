// Fills the CUDA column of the kernel table (explicit calls, as tensor/cpu/register.cpp), and
// installs the CUDA allocator, the profiler's timer and the cross-device copy with it.
#include "tensor/cuda/kernels.h"
#include "tensor/dispatch.h"

namespace minidl {

namespace cuda {
void install_allocator();       // allocator.cu
void install_profiler_timer();  // profiler_timer.cu
void cross_device_copy_impl(const Tensor& src, Tensor& dst);
}  // namespace cuda

// Registration needs no GPU: the table is filled on every CUDA build (op-coverage test).
void register_cuda_kernels() {
#define MINIDL_KERNEL_FAMILY(family) cuda::register_##family##_kernels();
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY
  set_cross_device_copy(&cuda::cross_device_copy_impl);
  cuda::install_allocator();
  cuda::install_profiler_timer();
}

const std::vector<KernelFamily>& cuda_kernel_families() {
  static const std::vector<KernelFamily> families = {
#define MINIDL_KERNEL_FAMILY(family) {#family, &cuda::register_##family##_kernels},
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY
  };
  return families;
}

}  // namespace minidl
