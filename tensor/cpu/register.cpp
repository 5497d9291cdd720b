// Fills the CPU column of the kernel table (explicit calls: static registration objects
// would be dropped from a static library).
#include "tensor/cpu/kernels.h"
#include "tensor/dispatch.h"

namespace minidl {

void register_cpu_kernels() {
#define MINIDL_KERNEL_FAMILY(family) cpu::register_##family##_kernels();
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY
}

const std::vector<KernelFamily>& cpu_kernel_families() {
  static const std::vector<KernelFamily> families = {
#define MINIDL_KERNEL_FAMILY(family) {#family, &cpu::register_##family##_kernels},
#include "tensor/kernel_families.def"
#undef MINIDL_KERNEL_FAMILY
  };
  return families;
}

}  // namespace minidl
