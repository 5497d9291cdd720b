// bench_gemm: f32 GEMM throughput of minidl::matmul (public API) against OpenBLAS cblas_sgemm
// in the same process and thread count; prints a markdown table (see bench/README.md).
// Usage: bench_gemm [--threads 2] [--rounds 3] [--quick]
#include <cblas.h>

#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "minidl.h"
#include "tensor/cpu/gemm.h"

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

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const bool quick = bench::flag_arg(argc, argv, "--quick");
  const int rounds = bench::int_arg(argc, argv, "--rounds", quick ? 1 : 3);
  set_num_threads(threads);
  openblas_set_num_threads(threads);

  std::vector<Shape3> shapes = {{256, 256, 256}, {1024, 1024, 1024}, {4096, 4096, 512}};
  std::printf("### f32 GEMM C[M,N] = A[M,K] @ B[K,N], %d threads\n\n", threads);
  std::printf(
      "| M x N x K | minidl matmul GFLOP/s | minidl gemm_f32 GFLOP/s | "
      "OpenBLAS sgemm GFLOP/s | ratio (matmul/OpenBLAS) | max rel err |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (Shape3 s : shapes) {
    Row r = run_shape(s, rounds, quick ? 0.1 : 0.4);
    const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
    std::printf("| %lld x %lld x %lld | %.1f | %.1f | %.1f | %.2f | %.1e |\n", (long long)s.M,
                (long long)s.N, (long long)s.K, gflop / r.minidl_s, gflop / r.raw_s,
                gflop / r.blas_s, r.blas_s / r.minidl_s, r.err);
    std::fflush(stdout);
  }
  std::printf(
      "\nmedian of %d rounds of alternating blocks; matmul includes allocating its output "
      "(gemm_f32 and sgemm write into preallocated memory).\n",
      rounds);
  return 0;
}
