// The kernel table: registration, lookup with a clear error when missing (op names: tensor/op.cpp).
#include "tensor/dispatch.h"

#include <mutex>

namespace minidl {
namespace {

void* g_table[kNumOps][kNumDeviceTypes] = {};
// While ops_registered_by runs: the (op, device) pairs being registered.
std::mutex g_record_mutex;
std::vector<std::pair<Op, DeviceType>>* g_recording = nullptr;

}  // namespace

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
  if (g_recording) g_recording->emplace_back(op, device);
}
void missing_kernel(Op op, DeviceType device) {
  MINIDL_FAIL("op `", op_name(op), "` has no ", device_type_name(device), " kernel");
}
}  // namespace detail

bool has_kernel(Op op, DeviceType device) {
  return detail::kernel_slot(op, device) != nullptr;
}

std::vector<Op> ops_registered_by(const KernelFamily& family, DeviceType device) {
  ensure_kernels_registered();
  std::lock_guard<std::mutex> lock(g_record_mutex);
  std::vector<std::pair<Op, DeviceType>> seen;
  g_recording = &seen;
  family.register_kernels();
  g_recording = nullptr;
  std::vector<Op> ops;
  for (const auto& [op, dev] : seen)
    if (dev == device) ops.push_back(op);
  return ops;
}

#ifndef MINIDL_WITH_CUDA
void register_cuda_kernels() {}
const std::vector<KernelFamily>& cuda_kernel_families() {
  static const std::vector<KernelFamily> none;
  return none;
}
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
