// bench_gemm: f32 GEMM throughput of minidl::matmul (public API) against OpenBLAS cblas_sgemm
// in the same process and thread count, then matmul's Eigen and oneDNN paths in f32 and bf16;
// prints markdown tables (see bench/README.md). --mnist: only the path table on the MNIST fc1
// products. Usage: bench_gemm [--threads 2] [--rounds 3] [--quick] [--mnist]
#include <cblas.h>

#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "minidl.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/onednn.h"

using namespace minidl;

namespace {

struct Shape3 {
  int64_t M, N, K;
};

struct Row {
  Shape3 s;
  double minidl_s, raw_s, blas_s, err;
};

Row run_shape(Shape3 s, int rounds, double block_target_s) {
  const int64_t M = s.M, N = s.N, K = s.K;
  std::vector<float> A = bench::random_floats(size_t(M * K), 1);
  std::vector<float> B = bench::random_floats(size_t(K * N), 2);
  std::vector<float> C_blas(size_t(M * N)), C_raw(size_t(M * N));
  // minidl tensors over the same data (contiguous, row-major)
  Tensor a = from_blob(A.data(), {M, K}, kFloat32), b = from_blob(B.data(), {K, N}, kFloat32);
  Tensor c;

  auto f_minidl = [&] { c = matmul(a, b); };  // allocates its output, like torch.matmul
  auto f_raw = [&] {  // the GEMM kernel under matmul, into preallocated memory
    cpu::gemm_f32(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C_raw.data(), N);
  };
  auto f_blas = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.0f, A.data(),
                int(K), B.data(), int(N), 0.0f, C_blas.data(), int(N));
  };
  const int block = bench::block_size(f_blas, block_target_s, 3, 200);
  std::vector<double> t = bench::time_alternating({f_minidl, f_raw, f_blas}, rounds, block);
  f_minidl();
  f_blas();
  double err = bench::max_rel_err(c.data_ptr<float>(), C_blas.data(), C_blas.size());
  err = std::max(err, bench::max_rel_err(C_raw.data(), C_blas.data(), C_blas.size()));
  return {s, t[0], t[1], t[2], err};
}

// matmul through each backend in f32 and bf16 (bf16 operands, f32 accumulation, bf16 result):
// seconds for {Eigen f32, oneDNN f32, Eigen bf16, oneDNN bf16 (the `auto` kernels), oneDNN bf16
// on its bf16 kernels}, and the bf16 error.
struct PathRow {
  double t[5];
  double bf16_err;
};

PathRow run_paths(Shape3 s, int rounds, double block_target_s) {
  const int64_t M = s.M, N = s.N, K = s.K;
  std::vector<float> A = bench::random_floats(size_t(M * K), 1);
  std::vector<float> B = bench::random_floats(size_t(K * N), 2);
  Tensor a = from_blob(A.data(), {M, K}, kFloat32), b = from_blob(B.data(), {K, N}, kFloat32);
  Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16);
  auto path = [&](CpuBackend be, bool bf16, Bf16Compute m) -> std::function<void()> {
    return [&, be, bf16, m] {
      set_cpu_backend(be);
      set_onednn_bf16_compute(m);
      Tensor c = bf16 ? matmul(a16, b16) : matmul(a, b);
    };
  };
  const Bf16Compute au = Bf16Compute::automatic;
  std::vector<std::function<void()>> fns = {
      path(CpuBackend::eigen, false, au), path(CpuBackend::onednn, false, au),
      path(CpuBackend::eigen, true, au), path(CpuBackend::onednn, true, au),
      path(CpuBackend::onednn, true, Bf16Compute::bf16)};
  const int block = bench::block_size(fns[0], block_target_s, 3, 200);
  std::vector<double> t = bench::time_alternating(fns, rounds, block);
  set_cpu_backend(CpuBackend::eigen);
  Tensor ref = matmul(a16.to(kFloat32), b16.to(kFloat32));  // exact products of bf16 inputs
  set_cpu_backend(CpuBackend::onednn);
  set_onednn_bf16_compute(au);
  Tensor got = matmul(a16, b16).to(kFloat32);
  set_cpu_backend(CpuBackend::automatic);
  PathRow r{{t[0], t[1], t[2], t[3], t[4]},
            bench::max_rel_err(got.data_ptr<float>(), ref.data_ptr<float>(), size_t(M * N))};
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const bool quick = bench::flag_arg(argc, argv, "--quick");
  const int rounds = bench::int_arg(argc, argv, "--rounds", quick ? 1 : 3);
  const bool mnist = bench::flag_arg(argc, argv, "--mnist");
  set_num_threads(threads);
  openblas_set_num_threads(threads);

  std::vector<Shape3> shapes = {{256, 256, 256}, {1024, 1024, 1024}, {4096, 4096, 512}};
  if (mnist) shapes.clear();
  if (!mnist) {
    std::printf("### f32 GEMM C[M,N] = A[M,K] @ B[K,N], %d threads\n\n", threads);
    std::printf(
        "| M x N x K | minidl matmul GFLOP/s | minidl gemm_f32 GFLOP/s | "
        "OpenBLAS sgemm GFLOP/s | ratio (matmul/OpenBLAS) | max rel err |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
  }
  for (Shape3 s : shapes) {
    Row r = run_shape(s, rounds, quick ? 0.1 : 0.4);
    const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
    std::printf("| %lld x %lld x %lld | %.1f | %.1f | %.1f | %.2f | %.1e |\n", (long long)s.M,
                (long long)s.N, (long long)s.K, gflop / r.minidl_s, gflop / r.raw_s,
                gflop / r.blas_s, r.blas_s / r.minidl_s, r.err);
    std::fflush(stdout);
  }
  if (!mnist)
    std::printf(
        "\nmedian of %d rounds of alternating blocks; matmul includes allocating its output "
        "(gemm_f32 and sgemm write into preallocated memory).\n",
        rounds);
  if (!onednn_available()) return 0;
  std::printf(
      "\n### matmul paths: Eigen vs oneDNN, f32 and bf16 (f32 accumulation, bf16 result), "
      "%d threads, GFLOP/s; oneDNN bf16: the `auto` choice, here %s kernels (native bf16: %s)\n\n",
      threads, onednn_bf16_in_f32() ? "f32" : "bf16", onednn_native_bf16() ? "yes" : "no");
  std::printf(
      "| M x N x K | Eigen f32 | oneDNN f32 | Eigen bf16 | oneDNN bf16 | oneDNN bf16 kernels | "
      "oneDNN f32 / Eigen f32 | oneDNN bf16 / Eigen f32 | bf16 max rel err |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<Shape3> path_shapes = shapes;
  if (mnist)  // fc1 forward, input gradient, weight gradient at batch 64
    path_shapes = {{64, 128, 9216}, {64, 9216, 128}, {128, 9216, 64}};
  else
    path_shapes.insert(path_shapes.begin(), {{64, 64, 64}, {64, 128, 800}, {1000, 128, 1600}});
  for (Shape3 s : path_shapes) {
    PathRow r = run_paths(s, rounds, quick ? 0.1 : 0.4);
    const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
    std::printf("| %lld x %lld x %lld | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1e |\n",
                (long long)s.M, (long long)s.N, (long long)s.K, gflop / r.t[0], gflop / r.t[1],
                gflop / r.t[2], gflop / r.t[3], gflop / r.t[4], r.t[0] / r.t[1], r.t[0] / r.t[3],
                r.bf16_err);
    std::fflush(stdout);
  }
  std::printf(
      "\nbf16 error: oneDNN's bf16 result against the f32 product of the same bf16 inputs "
      "(bf16 output rounding is 2^-9 = 2.0e-03 relative).\n");
  return 0;
}
