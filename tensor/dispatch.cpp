// The kernel table: op names, registration, lookup with a clear error when missing.
#include "tensor/dispatch.h"

#include <mutex>

namespace minidl {
namespace {

constexpr std::string_view kOpNames[] = {
#define MINIDL_OP(name, sig) #name,
#include "tensor/ops.def"
#undef MINIDL_OP
};

void* g_table[kNumOps][kNumDeviceTypes] = {};

}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[int(op)];
}

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
    register_cuda_kernels();
  });
}

namespace detail {
void* kernel_slot(Op op, DeviceType device) {
  ensure_kernels_registered();
  return g_table[int(op)][int(device)];
}
void set_kernel_slot(Op op, DeviceType device, void* fn) {
  g_table[int(op)][int(device)] = fn;
}
void missing_kernel(Op op, DeviceType device) {
  MINIDL_FAIL("op `", op_name(op), "` has no ", device_type_name(device), " kernel");
}
}  // namespace detail

bool has_kernel(Op op, DeviceType device) {
  return detail::kernel_slot(op, device) != nullptr;
}

#ifndef MINIDL_WITH_CUDA
void register_cuda_kernels() {}
#endif

}  // namespace minidl

namespace minidl {
namespace {
CrossDeviceCopyFn g_cross_device_copy = nullptr;
}
void set_cross_device_copy(CrossDeviceCopyFn fn) {
  g_cross_device_copy = fn;
}
CrossDeviceCopyFn cross_device_copy() {
  ensure_kernels_registered();
  return g_cross_device_copy;
}
}  // namespace minidl
