// Device parsing/printing and device_count() (CUDA count comes from the CUDA runtime when
// built with CUDA; 0 otherwise).
#include "tensor/device.h"

#include "tensor/error.h"

namespace minidl {

#ifdef MINIDL_WITH_CUDA
int cuda_device_count_impl();  // tensor/cuda/runtime/device.cu
#endif

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::cpu;
    index = 0;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::cuda;
    index = 0;
    if (spec.size() == 4) return;
    if (spec[4] == ':' && spec.size() > 5) {
      size_t used = 0;
      int i = -1;
      try {
        i = std::stoi(spec.substr(5), &used);
      } catch (const std::exception&) {
      }
      if (i >= 0 && used == spec.size() - 5) {
        index = i;
        return;
      }
    }
  }
  MINIDL_FAIL("invalid device string '", spec, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

int device_count(DeviceType t) {
  if (t == DeviceType::cpu) return 1;
#ifdef MINIDL_WITH_CUDA
  return cuda_device_count_impl();
#else
  return 0;
#endif
}

}  // namespace minidl
