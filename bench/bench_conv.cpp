// bench_conv: conv2d forward and backward (input, weight) through minidl's frontends on the
// MNIST CNN shapes (batch 64, 3x3, stride 1, no padding), against an im2col + OpenBLAS sgemm
// reference written here, in the same process. Usage: bench_conv [--threads 2] [--quick]
#include <cblas.h>

#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "minidl.h"

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

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const bool quick = bench::flag_arg(argc, argv, "--quick");
  const int rounds = bench::int_arg(argc, argv, "--rounds", quick ? 1 : 3);
  set_num_threads(threads);
  openblas_set_num_threads(threads);

  const std::vector<ConvShape> layers = {
      {"conv1 x[64,1,28,28] w[32,1,3,3]", 64, 1, 28, 28, 32, 3, 3},
      {"conv2 x[64,32,26,26] w[64,32,3,3]", 64, 32, 26, 26, 64, 3, 3}};
  std::printf("### conv2d f32, stride 1, no padding, batch 64, %d threads\n\n", threads);
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
  return 0;
}
