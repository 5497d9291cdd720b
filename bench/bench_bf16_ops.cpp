// Every op family of the MNIST CNN and the GPT block in bf16 against the same op in f32, same
// shapes, alternating in one process: bf16 must not take a slower path than f32 on a CPU
// without native bf16 (run it under MINIDL_CPU_ISA=avx2 or avx512 to see those classes).
// Prints one markdown row per op: ms per call in f32 and bf16, and bf16 / f32.
// Usage: bench_bf16_ops [--threads 2] [--rounds 5] [--only SUBSTRING]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "minidl.h"
#include "optim/adam.h"
#include "tensor/random.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cpu_isa.h"

using namespace minidl;

namespace {

Tensor rnd(const Shape& s, DType dt, uint64_t seed) {
  Generator g(seed);
  return mul(sub(rand(s, kFloat32, kCPU, &g), Scalar(0.5)), Scalar(2.0)).to(dt);
}

struct Case {
  std::string name;
  // Builds the op's inputs in dtype dt and returns the call to time.
  std::function<std::function<void()>(DType)> make;
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  const Conv2dParams unit{};
  // MNIST CNN, batch 64
  cs.push_back({"conv1 fwd [64,1,28,28]*[32,1,3,3]", [=](DType dt) {
                  Tensor x = rnd({64, 1, 28, 28}, dt, 1), w = rnd({32, 1, 3, 3}, dt, 2);
                  Tensor b = rnd({32}, dt, 3);
                  return std::function<void()>([=] { conv2d(x, w, b, unit); });
                }});
  cs.push_back({"conv1 bwd-weight", [=](DType dt) {
                  Tensor x = rnd({64, 1, 28, 28}, dt, 1), g = rnd({64, 32, 26, 26}, dt, 4);
                  return std::function<void()>([=] {
                    conv2d_backward_weight(g, x, Shape{32, 1, 3, 3}, unit);
                  });
                }});
  cs.push_back({"conv2 fwd [64,32,26,26]*[64,32,3,3]", [=](DType dt) {
                  Tensor x = rnd({64, 32, 26, 26}, dt, 5), w = rnd({64, 32, 3, 3}, dt, 6);
                  Tensor b = rnd({64}, dt, 7);
                  return std::function<void()>([=] { conv2d(x, w, b, unit); });
                }});
  cs.push_back({"conv2 bwd-input", [=](DType dt) {
                  Tensor w = rnd({64, 32, 3, 3}, dt, 6), g = rnd({64, 64, 24, 24}, dt, 8);
                  return std::function<void()>([=] {
                    conv2d_backward_input(g, w, Shape{64, 32, 26, 26}, unit);
                  });
                }});
  cs.push_back({"conv2 bwd-weight", [=](DType dt) {
                  Tensor x = rnd({64, 32, 26, 26}, dt, 5), g = rnd({64, 64, 24, 24}, dt, 8);
                  return std::function<void()>([=] {
                    conv2d_backward_weight(g, x, Shape{64, 32, 3, 3}, unit);
                  });
                }});
  cs.push_back({"max_pool2d 2x2 [64,64,24,24] fwd+bwd", [=](DType dt) {
                  Tensor x = rnd({64, 64, 24, 24}, dt, 9);
                  return std::function<void()>([=] {
                    auto [y, idx] = max_pool2d_with_indices(x, pool2d_params(2));
                    max_pool2d_backward(y, idx, x.shape(), pool2d_params(2));
                  });
                }});
  cs.push_back({"linear fc1 [64,9216]x[128,9216]^T+b", [=](DType dt) {
                  Tensor x = rnd({64, 9216}, dt, 10), w = rnd({128, 9216}, dt, 11);
                  Tensor b = rnd({128}, dt, 12);
                  return std::function<void()>([=] { linear(x, w, b); });
                }});
  cs.push_back({"fc1 grad_w g^T x [128,64]x[64,9216]", [=](DType dt) {
                  Tensor x = rnd({64, 9216}, dt, 10), g = rnd({64, 128}, dt, 13);
                  return std::function<void()>([=] { matmul(g.t(), x); });
                }});
  cs.push_back({"relu + where(x>0,g,0) [64,32,26,26]", [=](DType dt) {
                  Tensor x = rnd({64, 32, 26, 26}, dt, 14), g = rnd({64, 32, 26, 26}, dt, 15);
                  return std::function<void()>([=] {
                    relu(x);
                    where(gt(x, Scalar(0)), g, Scalar(0));
                  });
                }});
  cs.push_back({"add, mul [64,32,26,26]", [=](DType dt) {
                  Tensor x = rnd({64, 32, 26, 26}, dt, 14), y = rnd({64, 32, 26, 26}, dt, 15);
                  return std::function<void()>([=] { mul(add(x, y), y); });
                }});
  cs.push_back({"sum over batch [64,9216] -> [9216]", [=](DType dt) {
                  Tensor x = rnd({64, 9216}, dt, 16);
                  return std::function<void()>([=] { sum(x, {0}); });
                }});
  cs.push_back({"log_softmax + nll fwd/bwd [64,10]", [=](DType dt) {
                  Tensor x = rnd({64, 10}, dt, 17);
                  Generator gen(31);
                  Tensor t = randint(0, 10, {64}, kInt64, kCPU, &gen);
                  return std::function<void()>([=] {
                    auto r = cross_entropy_forward(x, t);
                    cross_entropy_backward(ones({}, x.dtype()), x, t, r.lse, Reduction::mean);
                  });
                }});
  cs.push_back({"dropout mask [64,9216]", [=](DType dt) {
                  Tensor x = rnd({64, 9216}, dt, 18);
                  return std::function<void()>([=] { nn::functional::dropout(x, 0.25, true); });
                }});
  // GPT block, batch 12 x 64 tokens, 128 channels, 4 heads
  cs.push_back({"layer_norm fwd+bwd [12,64,128]", [=](DType dt) {
                  Tensor x = rnd({12, 64, 128}, dt, 19), w = rnd({128}, kFloat32, 20);
                  Tensor b = rnd({128}, kFloat32, 21), g = rnd({12, 64, 128}, dt, 22);
                  return std::function<void()>([=] {
                    auto r = layer_norm(x, {128}, w, b);
                    layer_norm_backward(g, x, {128}, r.mean, r.rstd, w, true);
                  });
                }});
  cs.push_back({"gelu [12,64,512]", [=](DType dt) {
                  Tensor x = rnd({12, 64, 512}, dt, 23);
                  return std::function<void()>([=] { gelu(x); });
                }});
  cs.push_back({"softmax [12,4,64,64]", [=](DType dt) {
                  Tensor x = rnd({12, 4, 64, 64}, dt, 24);
                  return std::function<void()>([=] { softmax(x, -1); });
                }});
  cs.push_back({"sdpa causal fwd+bwd [12,4,64,32]", [=](DType dt) {
                  Tensor q = rnd({12, 4, 64, 32}, dt, 25), k = rnd({12, 4, 64, 32}, dt, 26);
                  Tensor v = rnd({12, 4, 64, 32}, dt, 27), g = rnd({12, 4, 64, 32}, dt, 28);
                  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
                  return std::function<void()>([=] {
                    Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
                    out.backward(g);
                  });
                }});
  cs.push_back({"AdamW step, 1.2M params (MNIST CNN size)", [=](DType dt) {
                  auto p = std::make_shared<Tensor>(rnd({1199882}, dt, 29));
                  p->requires_grad_();
                  p->mutable_grad() = rnd({1199882}, dt, 30);
                  auto opt = std::make_shared<optim::AdamW>(std::vector<Tensor>{*p}, 1e-3);
                  return std::function<void()>([p, opt] { opt->step(); });
                }});
  return cs;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 5);
  std::string only;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
  set_num_threads(threads);
  std::printf("bf16 vs f32 per op, %d thread(s), CPU kernels %s, oneDNN bf16 compute %s\n\n",
              threads, cpu_isa_summary().c_str(),
              !onednn_available()    ? "none (no oneDNN)"
              : onednn_bf16_in_f32() ? "f32 kernels"
                                     : "bf16 kernels");
  std::printf("| op | f32 ms | bf16 ms | bf16 / f32 |\n|---|---:|---:|---:|\n");
  for (const Case& c : cases()) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    auto f32 = c.make(kFloat32), bf16 = c.make(kBFloat16);
    const int block = bench::block_size(f32, 0.15, 2, 200);
    const auto t = bench::time_alternating({f32, bf16}, rounds, block);
    std::printf("| %s | %.3f | %.3f | %.2f |\n", c.name.c_str(), t[0] * 1e3, t[1] * 1e3,
                t[1] / t[0]);
    std::fflush(stdout);
  }
}
