// Out-of-tree consumer of an installed minidl: a few ops, checked, one line of output.
#include <minidl.h>

#include <cstdio>

int main() {
  using namespace minidl;
  Tensor a = arange(6, kFloat32).reshape({2, 3});
  Tensor b = ones({3, 2});
  Tensor c = matmul(a, b);  // [[3, 3], [12, 12]]
  const bool ok = c.at({0, 0}) == 3.0 && c.at({1, 1}) == 12.0;
  std::printf("consumer: matmul %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
