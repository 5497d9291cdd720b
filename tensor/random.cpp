// The process-wide default Generator (torch.default_generator) and torch.manual_seed.
#include "tensor/random.h"

namespace minidl {

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace minidl
