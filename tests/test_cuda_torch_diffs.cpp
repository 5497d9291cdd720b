// The PyTorch 1.13 goldens of test_torch_diffs.cpp run on CUDA (clamp promotion, BCE-with-logits,
// topk, max/min/amax/amin/maximum/minimum gradients); skipped without a GPU.
#include "torch_diffs_checks.h"

using namespace minidl;

TEST_SUITE("cuda_torch_diffs") {
  TEST_CASE("cuda torch_diffs: clamp promotion") {
    torch_diffs::check_clamp(kCUDA);
  }
  TEST_CASE("cuda torch_diffs: binary_cross_entropy_with_logits") {
    torch_diffs::check_bce(kCUDA);
  }
  TEST_CASE("cuda torch_diffs: topk gradient") {
    torch_diffs::check_topk(kCUDA);
  }
  TEST_CASE("cuda torch_diffs: max/min/amax/amin gradients with ties and NaN") {
    torch_diffs::check_reductions(kCUDA);
  }
  TEST_CASE("cuda torch_diffs: maximum/minimum gradients with ties and NaN") {
    torch_diffs::check_maximum_minimum(kCUDA);
  }
}
