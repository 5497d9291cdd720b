// Op names, from tensor/op_list.def.
#include "tensor/op.h"

namespace minidl {
namespace {

constexpr std::string_view kOpNames[] = {
#define MINIDL_OP(name, sig) #name,
#include "tensor/op_list.def"
#undef MINIDL_OP
};

}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[int(op)];
}

}  // namespace minidl
