// bench_conv: conv2d forward and backward (input, weight) through minidl's frontends on the
// MNIST CNN shapes (batch 64, 3x3, stride 1, no padding), against an im2col + OpenBLAS sgemm
// reference written here, in the same process; then the Eigen and oneDNN paths side by side in
// f32 and bf16 (bf16 also on oneDNN's bf16 kernels) with their peak temporaries.
// Usage: bench_conv [--threads 2] [--batch 64] [--quick]
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "minidl.h"
#include "tensor/cpu/onednn.h"

using namespace minidl;

namespace {

struct ConvShape {
  const char* name;
  int64_t N, C, H, W, O, kh, kw;
  int64_t Ho() const { return H - kh + 1; }
  int64_t Wo() const { return W - kw + 1; }
  int64_t ckk() const { return C * kh * kw; }
  int64_t cols() const { return N * Ho() * Wo(); }
  double gflop() const { return 2.0 * double(N * O * Ho() * Wo()) * double(ckk()) * 1e-9; }
};

// ---- reference: the whole batch as one GEMM over an im2col matrix col[C*kh*kw, N*Ho*Wo].
// The data movement runs on the calling thread: mixing OpenMP regions with OpenBLAS's own
// pthreads makes the two pools' spinning threads fight for the cores.
template <typename F>
void serial_for(int64_t n, F&& fn) {
  fn(0, n);
}

void im2col(const ConvShape& s, const float* x, float* col) {
  const int64_t Ho = s.Ho(), Wo = s.Wo(), HW = Ho * Wo;
  serial_for(s.ckk(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t c = r / (s.kh * s.kw), i = r / s.kw % s.kh, j = r % s.kw;
      float* dst = col + r * s.cols();
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const float* src = x + ((n * s.C + c) * s.H + oh + i) * s.W + j;
          float* d = dst + n * HW + oh * Wo;
          for (int64_t ow = 0; ow < Wo; ++ow) d[ow] = src[ow];
        }
    }
  });
}

// [N, O, HW] <-> [O, N*HW]
void nchw_to_ocols(const ConvShape& s, const float* src, float* dst) {
  const int64_t HW = s.Ho() * s.Wo();
  serial_for(s.N * s.O, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t n = p / s.O, o = p % s.O;
      std::copy(src + p * HW, src + (p + 1) * HW, dst + (o * s.N + n) * HW);
    }
  });
}
void ocols_to_nchw(const ConvShape& s, const float* src, float* dst) {
  const int64_t HW = s.Ho() * s.Wo();
  serial_for(s.N * s.O, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t n = p / s.O, o = p % s.O;
      std::copy(src + (o * s.N + n) * HW, src + (o * s.N + n + 1) * HW, dst + p * HW);
    }
  });
}

struct Reference {
  ConvShape s;
  std::vector<float> col, ycols, gcols;
  explicit Reference(const ConvShape& sh)
      : s(sh),
        col(size_t(sh.ckk() * sh.cols())),
        ycols(size_t(sh.O * sh.cols())),
        gcols(size_t(sh.ckk() * sh.cols())) {}

  void forward(const float* x, const float* w, float* y) {
    im2col(s, x, col.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.O), int(s.cols()), int(s.ckk()),
                1.0f, w, int(s.ckk()), col.data(), int(s.cols()), 0.0f, ycols.data(),
                int(s.cols()));
    ocols_to_nchw(s, ycols.data(), y);
  }
  void backward_weight(const float* gy, const float* x, float* gw) {
    im2col(s, x, col.data());
    nchw_to_ocols(s, gy, ycols.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.O), int(s.ckk()), int(s.cols()),
                1.0f, ycols.data(), int(s.cols()), col.data(), int(s.cols()), 0.0f, gw,
                int(s.ckk()));
  }
  void backward_input(const float* gy, const float* w, float* gx) {
    nchw_to_ocols(s, gy, ycols.data());
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.ckk()), int(s.cols()), int(s.O),
                1.0f, w, int(s.ckk()), ycols.data(), int(s.cols()), 0.0f, gcols.data(),
                int(s.cols()));
    // col2im: scatter-add each column row back into its (n, c) plane
    const int64_t Ho = s.Ho(), Wo = s.Wo(), HW = Ho * Wo;
    serial_for(s.N * s.C, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t n = p / s.C, c = p % s.C;
        float* plane = gx + p * s.H * s.W;
        std::fill(plane, plane + s.H * s.W, 0.0f);
        for (int64_t i = 0; i < s.kh; ++i)
          for (int64_t j = 0; j < s.kw; ++j) {
            const float* src = gcols.data() + ((c * s.kh + i) * s.kw + j) * s.cols() + n * HW;
            for (int64_t oh = 0; oh < Ho; ++oh) {
              float* d = plane + (oh + i) * s.W + j;
              for (int64_t ow = 0; ow < Wo; ++ow) d[ow] += src[oh * Wo + ow];
            }
          }
      }
    });
  }
};

struct Result {
  const char* op;
  double minidl_s, ref_s, err;
};

std::vector<Result> run_layer(const ConvShape& s, int rounds, double target_s) {
  std::vector<float> xv = bench::random_floats(size_t(s.N * s.C * s.H * s.W), 1);
  std::vector<float> wv = bench::random_floats(size_t(s.O * s.ckk()), 2);
  std::vector<float> gyv = bench::random_floats(size_t(s.N * s.O * s.Ho() * s.Wo()), 3);
  Tensor x = from_blob(xv.data(), {s.N, s.C, s.H, s.W}, kFloat32);
  Tensor w = from_blob(wv.data(), {s.O, s.C, s.kh, s.kw}, kFloat32);
  Tensor gy = from_blob(gyv.data(), {s.N, s.O, s.Ho(), s.Wo()}, kFloat32);
  const Conv2dParams p;
  Reference ref(s);
  std::vector<float> y_ref(gyv.size()), gw_ref(wv.size()), gx_ref(xv.size());
  Tensor y, gw, gx;

  std::vector<Result> out;
  auto measure = [&](const char* op, std::function<void()> mine, std::function<void()> theirs,
                     const Tensor& result, const std::vector<float>& expected) {
    const int block = bench::block_size(theirs, target_s, 3, 100);
    std::vector<double> t = bench::time_alternating({mine, theirs}, rounds, block);
    double err =
        bench::max_rel_err(result.contiguous().data_ptr<float>(), expected.data(), expected.size());
    out.push_back({op, t[0], t[1], err});
  };
  measure(
      "forward", [&] { y = conv2d(x, w, {}, p); },
      [&] { ref.forward(xv.data(), wv.data(), y_ref.data()); }, (y = conv2d(x, w, {}, p)), y_ref);
  measure(
      "backward input", [&] { gx = conv2d_backward_input(gy, w, x.shape(), p); },
      [&] { ref.backward_input(gyv.data(), wv.data(), gx_ref.data()); },
      (gx = conv2d_backward_input(gy, w, x.shape(), p)), gx_ref);
  measure(
      "backward weight", [&] { gw = conv2d_backward_weight(gy, x, w.shape(), p); },
      [&] { ref.backward_weight(gyv.data(), xv.data(), gw_ref.data()); },
      (gw = conv2d_backward_weight(gy, x, w.shape(), p)), gw_ref);
  return out;
}

// One op on one backend and dtype: median seconds, and the peak bytes the op allocated beyond
// its output (scratchpads, column buffers; minidl's allocator statistics).
struct PathResult {
  double s = 0;
  double extra_mib = 0;
};

// The Eigen and oneDNN paths of the three ops in f32 and bf16 for one layer; bf16 on oneDNN
// also on its bf16 kernels (native with avx512_bf16, emulated elsewhere) when `auto` picks f32.
void compare_paths(const ConvShape& s, int rounds, double target_s) {
  const Conv2dParams p;
  const char* ops[3] = {"forward", "backward input", "backward weight"};
  const CpuBackend backends[3] = {CpuBackend::eigen, CpuBackend::onednn, CpuBackend::onednn};
  const Bf16Compute modes[3] = {Bf16Compute::automatic, Bf16Compute::automatic, Bf16Compute::bf16};
  PathResult res[3][2][3];  // op, dtype (f32, bf16), path (Eigen, oneDNN, oneDNN bf16 kernels)
  for (int di = 0; di < 2; ++di) {
    const DType dt = di ? kBFloat16 : kFloat32;
    Tensor x = from_blob(bench::random_floats(size_t(s.N * s.C * s.H * s.W), 1).data(),
                         {s.N, s.C, s.H, s.W}, kFloat32)
                   .to(dt);
    Tensor w = from_blob(bench::random_floats(size_t(s.O * s.ckk()), 2).data(),
                         {s.O, s.C, s.kh, s.kw}, kFloat32)
                   .to(dt);
    Tensor gy = from_blob(bench::random_floats(size_t(s.N * s.O * s.Ho() * s.Wo()), 3).data(),
                          {s.N, s.O, s.Ho(), s.Wo()}, kFloat32)
                    .to(dt);
    for (int oi = 0; oi < 3; ++oi) {
      auto op = [&]() -> Tensor {
        if (oi == 0) return conv2d(x, w, {}, p);
        if (oi == 1) return conv2d_backward_input(gy, w, x.shape(), p);
        return conv2d_backward_weight(gy, x, w.shape(), p);
      };
      const int paths = di ? 3 : 2;
      std::vector<std::function<void()>> fns;
      for (int bi = 0; bi < paths; ++bi)
        fns.push_back([&op, be = backends[bi], m = modes[bi]] {
          set_cpu_backend(be);
          set_onednn_bf16_compute(m);
          Tensor r = op();
        });
      const int block = bench::block_size(fns[0], target_s, 2, 100);
      std::vector<double> t = bench::time_alternating(fns, rounds, block);
      for (int bi = 0; bi < paths; ++bi) {
        set_cpu_backend(backends[bi]);
        set_onednn_bf16_compute(modes[bi]);
        const int64_t base = memory_stats(kCPU).allocated;
        reset_peak_memory_stats(kCPU);
        Tensor r = op();
        const int64_t extra = memory_stats(kCPU).peak - base - int64_t(r.nbytes());
        res[oi][di][bi] = {t[size_t(bi)], double(extra) / (1 << 20)};
      }
    }
  }
  set_cpu_backend(CpuBackend::automatic);
  set_onednn_bf16_compute(Bf16Compute::automatic);
  for (int oi = 0; oi < 3; ++oi) {
    std::printf("| %s | %s |", s.name, ops[oi]);
    for (int di = 0; di < 2; ++di)
      for (int bi = 0; bi < (di ? 3 : 2); ++bi)
        std::printf(" %.3f (%.1f) |", res[oi][di][bi].s * 1e3, res[oi][di][bi].extra_mib);
    std::printf(" %.2f | %.2f | %.2f |\n", res[oi][0][0].s / res[oi][0][1].s,
                res[oi][1][0].s / res[oi][1][1].s, res[oi][0][0].s / res[oi][1][1].s);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const bool quick = bench::flag_arg(argc, argv, "--quick");
  const int rounds = bench::int_arg(argc, argv, "--rounds", quick ? 1 : 3);
  const int64_t N = bench::int_arg(argc, argv, "--batch", 64);
  set_num_threads(threads);
  openblas_set_num_threads(threads);

  const std::string n = std::to_string(N);
  const std::string name1 = "conv1 x[" + n + ",1,28,28] w[32,1,3,3]";
  const std::string name2 = "conv2 x[" + n + ",32,26,26] w[64,32,3,3]";
  const std::vector<ConvShape> layers = {{name1.c_str(), N, 1, 28, 28, 32, 3, 3},
                                         {name2.c_str(), N, 32, 26, 26, 64, 3, 3}};
  std::printf("### conv2d f32, stride 1, no padding, batch %lld, %d threads, CPU backend %s\n\n",
              (long long)N, threads, cpu_backend_name(cpu_backend()));
  std::printf(
      "| layer | op | minidl ms | minidl GFLOP/s | im2col+OpenBLAS ms | "
      "im2col+OpenBLAS GFLOP/s | ratio (ref time / minidl time) | max rel err |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const ConvShape& s : layers) {
    for (const Result& r : run_layer(s, rounds, quick ? 0.1 : 0.3)) {
      std::printf("| %s | %s | %.3f | %.1f | %.3f | %.1f | %.2f | %.1e |\n", s.name, r.op,
                  r.minidl_s * 1e3, s.gflop() / r.minidl_s, r.ref_s * 1e3, s.gflop() / r.ref_s,
                  r.ref_s / r.minidl_s, r.err);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nGFLOP per op = 2*N*O*Ho*Wo*C*kh*kw (the same for all three ops); median of %d "
      "rounds of alternating blocks. minidl allocates its outputs; the reference writes "
      "into preallocated buffers.\n",
      rounds);
  if (!onednn_available()) return 0;
  const char* layout = std::getenv("MINIDL_ONEDNN_LAYOUT");
  const bool blocked = !(layout && std::string(layout) == "plain");
  std::printf(
      "\n### conv2d: Eigen (im2col) vs oneDNN paths, batch %lld, %d threads, oneDNN layouts %s\n\n"
      "ms per op (MiB allocated beyond the output); oneDNN bf16: the `auto` choice, here %s "
      "kernels (native bf16: %s)\n\n",
      (long long)N, threads, blocked ? "blocked" : "plain", onednn_bf16_in_f32() ? "f32" : "bf16",
      onednn_native_bf16() ? "yes" : "no");
  std::printf(
      "| layer | op | Eigen f32 | oneDNN f32 | Eigen bf16 | oneDNN bf16 | oneDNN bf16 kernels | "
      "f32 Eigen/oneDNN | bf16 Eigen/oneDNN | Eigen f32 / oneDNN bf16 |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ConvShape& s : layers) compare_paths(s, rounds, quick ? 0.1 : 0.3);
  return 0;
}
