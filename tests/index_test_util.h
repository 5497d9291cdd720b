// Index tensors for the indexing tests (test_index.cpp, test_embedding.cpp): int64 tensors from
// a list, and seeded random indices in [0, n).
#pragma once
#include <cstdint>
#include <vector>

#include "test_util.h"

namespace index_test {

inline minidl::Tensor ints(const std::vector<int64_t>& v, const minidl::Shape& shape) {
  return minidl::tensor(v, shape);
}

// Random int64 indices in [0, n).
inline minidl::Tensor rand_index(const minidl::Shape& shape, int64_t n, uint64_t seed) {
  return testutil::random_tensor(shape, minidl::kInt64, seed, 0.0, double(n));
}

}  // namespace index_test
