// bench_pool: max_pool2d forward (values + indices) and backward through minidl's frontends on
// the MNIST CNN's pool (batch 64, 64 planes of 24x24, 2x2 stride 2) and a ResNet-style 3x3
// stride 2 padding 1 pool, in f32 and bf16, against the plain scalar window loop (written here,
// one thread) in the same process. The outputs must agree bitwise.
// Usage: bench_pool [--threads 2] [--batch 64] [--rounds 5]
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "bench_common.h"
#include "minidl.h"

using namespace minidl;

namespace {

struct PoolCase {
  const char* name;
  int64_t C, H, W, k, s, pad;
};

// Reference: every window scanned in row-major order (the first maximum wins, a NaN replaces
// anything), on f32 values; x:[P,H,W] -> out, idx:[P,Ho,Wo].
void ref_max_pool(const std::vector<float>& x, int64_t P, const PoolCase& c, int64_t Ho, int64_t Wo,
                  std::vector<float>& out, std::vector<int64_t>& idx) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t bi = -1;
        for (int64_t i = 0; i < c.k; ++i)
          for (int64_t j = 0; j < c.k; ++j) {
            const int64_t ih = oh * c.s - c.pad + i, iw = ow * c.s - c.pad + j;
            if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
            const float v = x[size_t((p * c.H + ih) * c.W + iw)];
            if (bi < 0) bi = ih * c.W + iw;
            if (v > best || std::isnan(v)) best = v, bi = ih * c.W + iw;
          }
        out[size_t((p * Ho + oh) * Wo + ow)] = best;
        idx[size_t((p * Ho + oh) * Wo + ow)] = bi;
      }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const int64_t N = bench::int_arg(argc, argv, "--batch", 64);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 5);
  set_num_threads(threads);
  std::printf("max_pool2d, minidl (%d threads) vs the scalar window loop (1 thread), batch %ld\n",
              threads, long(N));
  std::printf("%-22s %-5s %10s %10s %8s %12s %8s\n", "case", "dtype", "fwd ms", "ref ms", "ratio",
              "bwd ms", "same");
  const PoolCase cases[] = {{"mnist 2x2/2", 64, 24, 24, 2, 2, 0},
                            {"resnet 3x3/2 pad 1", 64, 56, 56, 3, 2, 1}};
  for (const PoolCase& c : cases) {
    for (DType dt : {kFloat32, kBFloat16}) {
      const Pool2dParams p = pool2d_params(c.k, c.s, c.pad);
      const int64_t P = N * c.C;
      const std::vector<float> xs = bench::random_floats(size_t(P * c.H * c.W), 7);
      Tensor xf = empty({N, c.C, c.H, c.W});
      std::copy(xs.begin(), xs.end(), xf.data_ptr<float>());
      const Tensor x = xf.to(dt);
      const Tensor xr = x.to(kFloat32);  // the values the reference sees
      const std::vector<float> xv(xr.data_ptr<float>(), xr.data_ptr<float>() + xr.numel());
      auto [out, idx] = max_pool2d_with_indices(x, p);
      const int64_t Ho = out.size(2), Wo = out.size(3);
      std::vector<float> ro(size_t(P * Ho * Wo));
      std::vector<int64_t> ri(ro.size());
      const Tensor g = out.detach().clone();
      Tensor gx;
      auto fwd = [&] { std::tie(out, idx) = max_pool2d_with_indices(x, p); };
      auto ref = [&] { ref_max_pool(xv, P, c, Ho, Wo, ro, ri); };
      auto bwd = [&] { gx = max_pool2d_backward(g, idx, x.shape(), p); };
      const int block = bench::block_size(ref, 0.2, 2, 200);
      const std::vector<double> t = bench::time_alternating({fwd, ref, bwd}, rounds, block);
      const Tensor of = out.to(kFloat32);
      bool same = idx.tolist<int64_t>() == ri;
      for (size_t i = 0; same && i < ro.size(); ++i) same = of.data_ptr<float>()[i] == ro[i];
      std::printf("%-22s %-5s %10.3f %10.3f %8.2f %12.3f %8s\n", c.name,
                  std::string(dtype_name(dt)).c_str(), t[0] * 1e3, t[1] * 1e3, t[0] / t[1],
                  t[2] * 1e3, same ? "yes" : "NO");
      if (!same) return 1;
    }
  }
  return 0;
}
