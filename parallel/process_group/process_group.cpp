// Reduce-op names (the one out-of-line piece of the ProcessGroup interface).
#include "parallel/process_group/process_group.h"

namespace minidl::dist {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

}  // namespace minidl::dist
