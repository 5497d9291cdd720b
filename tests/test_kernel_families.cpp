// The kernel registration mirrors by family: both devices register from
// tensor/kernel_families.def, no op is registered by two families of one device, and an op
// with a kernel on both devices comes from the same family on each (checked where CUDA is
// compiled in; registration needs no GPU).
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tensor/cuda_api.h"
#include "tensor/dispatch.h"

using namespace minidl;

namespace {
// op -> the family that registers it on `device`; fails on an op registered by two families.
std::map<int, std::string> family_of_ops(const std::vector<KernelFamily>& families,
                                         DeviceType device) {
  std::map<int, std::string> owner;
  for (const KernelFamily& f : families) {
    for (Op op : ops_registered_by(f, device)) {
      auto [it, fresh] = owner.emplace(int(op), std::string(f.name));
      CHECK_MESSAGE(fresh, "op `", op_name(op), "` is registered by two ", device_type_name(device),
                    " families: ", it->second, " and ", f.name);
    }
  }
  return owner;
}
}  // namespace

TEST_CASE("kernel families: every CPU family registers ops, each op in one family") {
  const auto& families = cpu_kernel_families();
  REQUIRE(families.size() >= 16);
  for (const KernelFamily& f : families)
    CHECK_MESSAGE(!ops_registered_by(f, DeviceType::cpu).empty(), "family ", f.name);
  const auto owner = family_of_ops(families, DeviceType::cpu);
  CHECK(owner.size() > 80);
  // Every registered CPU kernel was found through a family.
  for (int i = 0; i < kNumOps; ++i)
    if (has_kernel(Op(i), DeviceType::cpu))
      CHECK_MESSAGE(owner.count(i), "op `", op_name(Op(i)), "` has no CPU family");
}

TEST_CASE("kernel families: an op on both devices is in the same family") {
  const auto& cuda = cuda_kernel_families();
  if (!cuda::is_built()) {
    CHECK(cuda.empty());
    MESSAGE("CPU-only build: no CUDA registration to compare");
    return;
  }
  REQUIRE(cuda.size() == cpu_kernel_families().size());
  for (size_t i = 0; i < cuda.size(); ++i) CHECK(cuda[i].name == cpu_kernel_families()[i].name);
  const auto on_cpu = family_of_ops(cpu_kernel_families(), DeviceType::cpu);
  const auto on_cuda = family_of_ops(cuda, DeviceType::cuda);
  int both = 0;
  for (const auto& [op, family] : on_cuda) {
    auto it = on_cpu.find(op);
    if (it == on_cpu.end()) continue;
    ++both;
    CHECK_MESSAGE(it->second == family, "op `", op_name(Op(op)), "`: CPU family ", it->second,
                  ", CUDA family ", family);
  }
  CHECK(both > 80);
}
