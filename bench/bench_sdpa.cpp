// Fused scaled_dot_product_attention vs the composite (matmul/softmax) path on the CPU:
// forward + backward at the GPT's shape (B=12, H=4, T=256, E=32, causal) and T=64, f32 and
// bf16; or one shape (`--shape B,H,T,E`, e.g. GPT-2's 1,12,1024,64), causal, beside
// bench/torch_sdpa.py. Usage: bench_sdpa [--threads 2] [--rounds 5] [--shape B,H,T,E]
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "minidl.h"

using namespace minidl;

namespace {

// One training-style call: out = attn(q, k, v); out.backward(gout).
double time_fwd_bwd(bool fused, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                    const Tensor& gout, bool causal, int rounds) {
  auto step = [&] {
    Tensor q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true);
    Tensor v = v0.detach().requires_grad_(true);
    Tensor out = fused ? scaled_dot_product_attention(q, k, v, {}, 0.0, causal)
                       : scaled_dot_product_attention_math(q, k, v, {}, 0.0, causal);
    out.backward(gout);
  };
  const int block = bench::block_size(step, 0.3, 2, 200);
  return bench::time_alternating({step}, rounds, block)[0];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 5);
  set_num_threads(threads);
  std::printf("scaled_dot_product_attention forward+backward, %d threads (median ms per call)\n",
              threads);
  std::printf("%-28s %-5s %-6s %10s %10s %8s\n", "shape [B,H,T,E]", "dtype", "causal", "fused",
              "composite", "speedup");
  int64_t B = 12, H = 4, E = 32;
  std::vector<int64_t> lengths = {256, 64};
  std::vector<bool> causal_modes = {true, false};
  const std::string shape_arg = bench::str_arg(argc, argv, "--shape", "");
  if (!shape_arg.empty()) {  // B,H,T,E: that shape only, causal
    std::vector<int64_t> d;
    std::stringstream ss(shape_arg);
    for (std::string part; std::getline(ss, part, ',');) d.push_back(std::stoll(part));
    if (d.size() != 4) {
      std::fprintf(stderr, "bench_sdpa: --shape wants B,H,T,E, got '%s'\n", shape_arg.c_str());
      return 2;
    }
    B = d[0], H = d[1], E = d[3];
    lengths = {d[2]};
    causal_modes = {true};
  }
  for (int64_t T : lengths) {
    for (DType dt : {kFloat32, kBFloat16}) {
      for (bool causal : causal_modes) {
        Tensor q = randn({B, H, T, E}).to(dt), k = randn({B, H, T, E}).to(dt);
        Tensor v = randn({B, H, T, E}).to(dt), g = randn({B, H, T, E}).to(dt);
        const double tf = time_fwd_bwd(true, q, k, v, g, causal, rounds);
        const double tc = time_fwd_bwd(false, q, k, v, g, causal, rounds);
        const std::string shape = "[" + std::to_string(B) + "," + std::to_string(H) + "," +
                                  std::to_string(T) + "," + std::to_string(E) + "]";
        std::printf("%-28s %-5s %-6s %10.3f %10.3f %7.2fx\n", shape.c_str(),
                    std::string(dtype_name(dt)).c_str(), causal ? "yes" : "no", tf * 1e3, tc * 1e3,
                    tc / tf);
      }
    }
  }
  return 0;
}
