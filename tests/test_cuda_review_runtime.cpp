// Suite cuda_review_runtime: regressions found by reading the CUDA runtime and NCCL code before
// it ever ran: NCCL work queried while unfinished leaves no stale "device not ready" for the next
// kernel launch, and a one-rank NCCL group runs every collective (CPU tensors staged through the
// GPU) and outlives none of the tensors it used; cuDNN's timed (benchmark) convolution algorithms
// agree with its heuristic choice. Skipped without a GPU (the NCCL cases also without NCCL).
#include <doctest/doctest.h>

#include <chrono>

#include "autograd/ops.h"
#include "parallel/distributed.h"
#include "parallel/process_group/process_group.h"
#include "parallel/store/tcp_store.h"
#include "tensor/cuda_api.h"
#include "test_util.h"

using namespace minidl;
using testutil::check_close;
using testutil::random_tensor;
using testutil::to_f64;

#if MINIDL_TEST_WITH_NCCL
namespace {

std::shared_ptr<dist::ProcessGroup> nccl_world1() {
  auto store =
      std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = 0, .is_master = true});
  return dist::make_process_group("nccl", store, 0, 1,
                                  dist::ProcessGroupOptions{.timeout = std::chrono::minutes(1)});
}

// Queues tens of milliseconds of GEMMs on the compute stream, so a collective launched next
// (ordered after them) is still unfinished when the host queries it. a:[4096,4096]
Tensor queue_gemms(const Tensor& a) {
  Tensor c;
  for (int k = 0; k < 20; ++k) c = matmul(a, a);
  return c;
}

}  // namespace
#endif

TEST_SUITE("cuda_review_runtime") {
#if MINIDL_TEST_WITH_NCCL
  TEST_CASE("cuda nccl: unfinished work's is_completed() and wait() leave no stale CUDA error") {
    // cudaEventQuery's cudaErrorNotReady is also the thread's last error; uncleared, the next
    // kernel's launch check (cudaGetLastError) failed with "device not ready".
    auto pg = nccl_world1();
    const Tensor a = rand({4096, 4096}, kFloat32, kCUDA);
    Tensor t = full({1000}, 3.0, kFloat32, kCUDA);

    Tensor c = queue_gemms(a);
    auto w = pg->allreduce(t);
    const bool early = w->is_completed();
    if (early) MESSAGE("the GEMMs finished before is_completed(): that path is not exercised");
    Tensor u;
    CHECK_NOTHROW(u = full({8}, 2.0, kFloat32, kCUDA) + 1.0);  // a kernel launch
    w->wait();
    check_close(u, std::vector<double>(8, 3.0), 0, 0);

    c = queue_gemms(a);
    auto w2 = pg->allreduce(t);
    w2->wait();  // polls the event while it is not ready
    CHECK_NOTHROW(u = full({8}, 5.0, kFloat32, kCUDA) * 2.0);
    check_close(u, std::vector<double>(8, 10.0), 0, 0);
    check_close(t, std::vector<double>(1000, 3.0), 0, 0);  // the sum over one rank
  }

  TEST_CASE("cuda nccl: a one-rank group runs every collective on CUDA and CPU tensors") {
    auto pg = nccl_world1();
    CHECK(pg->backend() == "nccl");
    Tensor f = testutil::random_tensor({5, 3}, kFloat32, 1).to(kCUDA);
    const Tensor f0 = f.cpu();
    pg->allreduce(f)->wait();
    check_close(f, f0, 0, 0);
    Tensor i = testutil::from_f64({7, -7, 5}, {3}, kInt64);  // CPU: staged through the GPU
    pg->allreduce(i, dist::ReduceOp::avg)->wait();           // integers: sum, floor-divide by 1
    CHECK(i.is_cpu());
    check_close(i, std::vector<double>{7, -7, 5}, 0, 0);
    Tensor b = full({4}, 2.5, kFloat64, kCUDA);
    pg->broadcast(b, 0)->wait();
    check_close(b, std::vector<double>(4, 2.5), 0, 0);

    const Tensor in = arange(0, 6, 1, kFloat32, kCUDA);
    std::vector<Tensor> outs{zeros({6}, kFloat32, kCUDA)};
    pg->allgather(outs, in)->wait();
    check_close(outs[0], in.cpu(), 0, 0);
    Tensor out = zeros({6}, kFloat32, kCUDA);
    pg->reduce_scatter(out, {in}, dist::ReduceOp::max)->wait();
    check_close(out, in.cpu(), 0, 0);
    std::vector<Tensor> gathered{zeros({6}, kFloat32)};  // CPU output on the root
    pg->gather(gathered, in, 0)->wait();
    check_close(gathered[0], in.cpu(), 0, 0);
    pg->barrier()->wait();
    CHECK(pg->collective_counts().collectives == 7);

    // The group goes first; a tensor its stream used is freed afterwards (the allocator then
    // records an event on that stream, which must still exist).
    Tensor kept = ones({1 << 20}, kFloat32, kCUDA);
    pg->allreduce(kept)->wait();
    pg.reset();
    kept = Tensor();
    Tensor z = ones({1 << 20}, kFloat32, kCUDA) * 3.0;
    cuda::synchronize();
    CHECK(sum(z).item<double>() == 3.0 * (1 << 20));
  }
#endif

  // Heuristic (default) and timed (benchmark) algorithm choices are separate cached plans; both
  // compute the same f32 convolution and its two gradients up to rounding.
  TEST_CASE("cuda conv: benchmark mode (timed algorithms) agrees with the heuristic choice") {
    CHECK_FALSE(cuda::cudnn_benchmark());  // the default, as torch.backends.cudnn.benchmark
    const bool prev_tf32 = cuda::allow_tf32();
    cuda::set_allow_tf32(false);
    std::vector<Tensor> results[2];
    for (int mode = 0; mode < 2; ++mode) {
      cuda::set_cudnn_benchmark(mode == 1);
      CHECK(cuda::cudnn_benchmark() == (mode == 1));
      Tensor x = random_tensor({8, 16, 20, 20}, kFloat32, 3).to(kCUDA);
      Tensor w = random_tensor({32, 16, 3, 3}, kFloat32, 4, -0.2, 0.2).to(kCUDA);
      x.requires_grad_();
      w.requires_grad_();
      Conv2dParams p;
      p.padding[0] = p.padding[1] = 1;
      Tensor y = conv2d(x, w, Tensor(), p);
      sum(y * y).backward();
      results[mode] = {y.detach(), x.grad(), w.grad()};
    }
    cuda::set_cudnn_benchmark(false);
    cuda::set_allow_tf32(prev_tf32);
    const char* names[] = {"output", "grad input", "grad weight"};
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(names[k]);
      const double scale = max(abs(results[0][k])).item<double>();
      CHECK(max(abs(results[1][k] - results[0][k])).item<double>() <= 1e-4 * scale);
    }
  }
}
