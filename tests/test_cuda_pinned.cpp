// Suite cuda_pinned: the caching pinned host allocator. Freed pinned blocks are reused (no
// cudaHostAlloc per batch), a block is not reused while an async host->device copy still reads
// it, and empty_cache() gives cached blocks back. Skipped without a GPU.
#include <doctest/doctest.h>

#include "tensor/cuda_api.h"
#include "autograd/ops.h"
#include "tensor/pinned.h"
#include "test_util.h"

using namespace minidl;
using testutil::check_close;

TEST_SUITE("cuda_pinned") {
  TEST_CASE("cuda pinned: a freed block is reused for the next request of its size class") {
    const void* first = nullptr;
    {
      Tensor a = empty_pinned({1000}, kFloat32);  // 4000 bytes -> the 4 KiB class
      CHECK(is_pinned(a));
      first = a.data_ptr();
    }
    Tensor b = empty_pinned({1024}, kFloat32);  // 4096 bytes: the same class
    CHECK(is_pinned(b));
    CHECK(b.data_ptr() == first);
    Tensor c = empty_pinned({1024}, kFloat32);  // b is live: another block
    CHECK(c.data_ptr() != b.data_ptr());
  }

  TEST_CASE("cuda pinned: blocks read by in-flight copies are not reused early") {
    // Many 64 MiB pinned sources copied asynchronously, each dropped at once and refilled with
    // new values: a block reused before its copy finished would give a device tensor the
    // next batch's values.
    constexpr int kBatches = 12;
    constexpr int64_t kN = 16 << 20;  // 64 MiB of f32
    // Queue ~0.1-0.5 s of GEMMs first, so the copies wait on the stream while the host
    // drops and refills their sources.
    Tensor big = rand({4096, 4096}, kFloat32, kCUDA);
    for (int k = 0; k < 40; ++k) big = matmul(big, big);
    std::vector<Tensor> on_gpu;
    for (int i = 0; i < kBatches; ++i) {
      Tensor host = pin_memory(full({kN}, double(i), kFloat32));
      on_gpu.push_back(host.to(kCUDA));
    }
    cuda::synchronize();
    for (int i = 0; i < kBatches; ++i) {
      CAPTURE(i);
      CHECK(amin(on_gpu[size_t(i)], {0}).item<double>() == double(i));
      CHECK(amax(on_gpu[size_t(i)], {0}).item<double>() == double(i));
    }
  }

  TEST_CASE("cuda pinned: empty_cache frees cached blocks and later requests still work") {
    { Tensor a = empty_pinned({3000}, kFloat32); }
    cuda::empty_cache();
    Tensor b = pin_memory(arange(0, 3000, 1, kFloat32));
    check_close(b.to(kCUDA).cpu(), arange(0, 3000, 1, kFloat32), 0, 0);
  }
}
