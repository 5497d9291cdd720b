// Op names, from tensor/ops.def.
#include "tensor/op.h"

namespace minidl {
namespace {

constexpr std::string_view kOpNames[] = {
#define MINIDL_OP(name, sig) #name,
#include "tensor/ops.def"
#undef MINIDL_OP
};

}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[int(op)];
}

}  // namespace minidl
