// The op enum of the kernel table, one entry per line of tensor/op_list.def, and its names.
#pragma once
#include <cstdint>
#include <string_view>

namespace minidl {

enum class Op : uint16_t {
#define MINIDL_OP(name, sig) name,
#include "tensor/op_list.def"
#undef MINIDL_OP
  kCount
};
inline constexpr int kNumOps = int(Op::kCount);

std::string_view op_name(Op op);

}  // namespace minidl
