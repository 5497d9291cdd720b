// The nccl backend's entry points in builds without NCCL (CMakeLists.txt compiles this file
// instead of the .cu files beside it): nccl_available() is false and making a group throws.
#include "parallel/nccl/process_group_nccl.h"
#include "tensor/error.h"

namespace minidl::dist {
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store>, int, int,
                                                      const ProcessGroupOptions&) {
  MINIDL_FAIL(
      "the nccl backend is not available: minidl was built without CUDA/NCCL "
      "(use the gloo backend)");
}
bool nccl_available() {
  return false;
}
}  // namespace minidl::dist
