// tensor_demo: a short tour of minidl tensors and ops (the main program until mnist_ddp).
#include <chrono>
#include <cstdio>
#include <iostream>

#include "minidl.h"

int main() {
  using namespace minidl;
  auto t0 = std::chrono::steady_clock::now();
  Tensor a = arange(6, kFloat32).reshape({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "a.t() = " << a.t() << "\n";
  std::cout << "CUDA devices: " << device_count(DeviceType::cuda) << "\n";
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tensor_demo: ok in %.1f ms\n", ms);
  return 0;
}
