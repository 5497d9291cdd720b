// GPU kernel benchmarks: bf16 GEMM through minidl::matmul against raw cuBLASLt calls written
// here (same process, same stream), memory-bound kernels (add, layer_norm, softmax and its
// backward, reductions, AdamW step) against the measured cudaMemcpy device-to-device bandwidth,
// and the fused causal attention and classifier + loss at GPT-2's shapes (the PyTorch side times
// its SDPA and cross_entropy).
// One JSON line per metric.
// Usage: bench_cuda_kernels [--reps 7] [--iters 20] [--mb 64] [--device 0]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "minidl.h"
#include "tensor/variants.h"

using namespace minidl;

namespace {

#define BENCH_CUDA(call)                                                            \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) MINIDL_FAIL(#call, " failed: ", cudaGetErrorString(e_)); \
  } while (0)
#define BENCH_LT(call)                                                                \
  do {                                                                                \
    cublasStatus_t s_ = (call);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) MINIDL_FAIL(#call, " failed: status ", int(s_)); \
  } while (0)

// Median ms per call of fn over `reps` blocks of `iters` calls, timed with cudaEvents on the
// compute stream (after one untimed call).
double time_ms(const std::function<void()>& fn, cudaStream_t stream, int reps, int iters) {
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  fn();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, stream));
    for (int i = 0; i < iters; ++i) fn();
    BENCH_CUDA(cudaEventRecord(e1, stream));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    v.push_back(double(ms) / iters);
  }
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  return bench::median(v);
}

// Raw cuBLASLt: row-major c[M,N] = a[M,K] b[K,N] in bf16 with f32 accumulation, computed as the
// column-major product c^T = b^T a^T (the layout PyTorch uses), heuristic's first algorithm.
struct LtGemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Tensor workspace;  // 32 MiB from minidl's allocator

  LtGemm(int64_t M, int64_t N, int64_t K, Device dev) {
    workspace = empty({32 << 20}, kUInt8, dev);
    BENCH_LT(cublasLtCreate(&handle));
    BENCH_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op = CUBLAS_OP_N;
    BENCH_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)));
    BENCH_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof(op)));
    BENCH_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, uint64_t(N), uint64_t(K), N));  // b^T
    BENCH_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, uint64_t(K), uint64_t(M), K));  // a^T
    BENCH_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(N), uint64_t(M), N));  // c^T
    cublasLtMatmulPreference_t pref = nullptr;
    BENCH_LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = uint64_t(workspace.numel());
    BENCH_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t res{};
    int n = 0;
    BENCH_LT(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, 1, &res, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    MINIDL_CHECK(n > 0, "cuBLASLt: no algorithm for bf16 [", M, ",", K, "]x[", K, ",", N, "]");
    algo = res.algo;
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void run(const Tensor& a, const Tensor& b, Tensor& c, cudaStream_t s) const {
    const float one = 1.f, zero = 0.f;
    BENCH_LT(cublasLtMatmul(handle, desc, &one, b.data_ptr(), la, a.data_ptr(), lb, &zero,
                            c.data_ptr(), lc, c.data_ptr(), lc, &algo, workspace.data_ptr(),
                            size_t(workspace.numel()), s));
  }
};

// max |x - ref| / max |ref|, on the device.
double rel_err(const Tensor& x, const Tensor& ref) {
  Tensor r = ref.to(kFloat32);
  double diff = amax(abs(x.to(kFloat32) - r)).item<double>();
  double scale = amax(abs(r)).item<double>();
  return scale > 0 ? diff / scale : diff;
}

void bench_gemm(int64_t M, int64_t N, int64_t K, Device dev, cudaStream_t s, int reps, int iters) {
  Tensor a = randn({M, K}, kFloat32, dev).to(kBFloat16);  // a:[M,K]
  Tensor b = randn({K, N}, kFloat32, dev).to(kBFloat16);  // b:[K,N]
  Tensor c_ref = empty({M, N}, kBFloat16, dev);
  LtGemm lt(M, N, K, dev);
  Tensor c_minidl;
  const double t_minidl = time_ms([&] { c_minidl = matmul(a, b); }, s, reps, iters);
  const double t_ref = time_ms([&] { lt.run(a, b, c_ref, s); }, s, reps, iters);
  const double flops = 2.0 * double(M) * double(N) * double(K);
  std::printf(
      "{\"bench\":\"gemm\",\"dtype\":\"bf16\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
      "\"minidl_ms\":%.4f,\"ref\":\"cublasLt\",\"ref_ms\":%.4f,\"minidl_tflops\":%.1f,"
      "\"ref_tflops\":%.1f,\"ratio\":%.3f,\"max_rel_err\":%.2e}\n",
      (long long)M, (long long)N, (long long)K, t_minidl, t_ref, flops / t_minidl * 1e-9,
      flops / t_ref * 1e-9, t_ref / t_minidl, rel_err(c_minidl, c_ref));
  std::fflush(stdout);
}

// One memory-bound kernel: GB/s = bytes moved / time, and its ratio to the copy bandwidth.
void report_bw(const char* kernel, const std::string& shape, double bytes, double ms,
               double copy_gbps, const char* dtype = "f32") {
  const double gbps = bytes / (ms * 1e-3) * 1e-9;
  std::printf(
      "{\"bench\":\"membw\",\"kernel\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\","
      "\"bytes\":%.0f,\"minidl_ms\":%.4f,\"minidl_gbps\":%.1f,\"ref\":\"cudaMemcpy D2D\","
      "\"ref_gbps\":%.1f,\"ratio\":%.3f}\n",
      kernel, shape.c_str(), dtype, bytes, ms, gbps, copy_gbps, gbps / copy_gbps);
  std::fflush(stdout);
}

// Causal scaled_dot_product_attention, bf16, q/k/v:[B,H,T,hd]: the forward alone and forward +
// backward (the gradient of sum(out * g)), in ms and in TFLOP/s of the causal half (forward
// 2 products of 2*T*T/2*hd FLOPs per head, backward 2.5 times that, as FlashAttention counts).
// impl names the row: "minidl" (every fused path), "minidl_flash_ld32" (MINIDL_UNFUSED set by
// the caller to flash_ldmatrix) or "minidl_wmma" (to flash_attention: the WMMA kernels).
void bench_sdpa(int64_t B, int64_t H, int64_t T, int64_t hd, Device dev, cudaStream_t s, int reps,
                int iters, const char* impl) {
  Tensor q = randn({B, H, T, hd}, kFloat32, dev).to(kBFloat16).requires_grad_();
  Tensor k = randn({B, H, T, hd}, kFloat32, dev).to(kBFloat16).requires_grad_();
  Tensor v = randn({B, H, T, hd}, kFloat32, dev).to(kBFloat16).requires_grad_();
  Tensor g = randn({B, H, T, hd}, kFloat32, dev).to(kBFloat16);
  Tensor out;
  const double fwd_ms = time_ms(
      [&] {
        NoGradGuard no_grad;
        out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
      },
      s, reps, iters);
  const double fwd_bwd_ms = time_ms(
      [&] {
        out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
        sum(out * g).backward();
      },
      s, reps, iters);
  const double fwd_flops = 4.0 * double(B * H) * double(T) * double(T) / 2 * double(hd);
  std::printf(
      "{\"bench\":\"sdpa\",\"impl\":\"%s\",\"dtype\":\"bf16\",\"B\":%lld,\"H\":%lld,"
      "\"T\":%lld,\"hd\":%lld,\"causal\":true,\"fwd_ms\":%.4f,\"fwd_bwd_ms\":%.4f,"
      "\"fwd_tflops\":%.1f,\"fwd_bwd_tflops\":%.1f}\n",
      impl, (long long)B, (long long)H, (long long)T, (long long)hd, fwd_ms, fwd_bwd_ms,
      fwd_flops / fwd_ms * 1e-9, 3.5 * fwd_flops / fwd_bwd_ms * 1e-9);
  std::fflush(stdout);
}

// The classifier + loss at GPT-2's shape: bf16 logits [N,Vp] (N = B*T tokens, Vp the padded
// vocabulary, the loss over the first V columns), forward and the logits' gradient. fused: one
// fused_cross_entropy_ (gradient written in place; repeated on the overwritten buffer, which
// costs the same); unfused (MINIDL_UNFUSED=classifier_loss, gpt's old lm_loss): the f32 copy of
// the real columns, cross_entropy and its backward through the slice.
void bench_classifier(int64_t N, int64_t V, int64_t Vp, Device dev, cudaStream_t s, int reps,
                      int iters) {
  Tensor logits = randn({N, Vp}, kFloat32, dev).to(kBFloat16);  // logits:[N,Vp]
  Tensor target = randint(0, V, {N}, kInt64, dev);              // target:[N]
  Tensor loss;
  const double fused_ms = time_ms(
      [&] { loss = native::fused_cross_entropy_(logits, target, V, -100); }, s, reps, iters);
  Tensor leaf = randn({N, Vp}, kFloat32, dev).to(kBFloat16).requires_grad_();
  const double unfused_ms = time_ms(
      [&] {
        leaf.set_grad(Tensor());
        loss = cross_entropy(leaf.slice(-1, 0, V).to(kFloat32), target);
        loss.backward();
      },
      s, reps, iters);
  // Reads the bf16 logits twice (max/sum, then the gradient pass) and writes them once.
  const double bytes = 3.0 * double(N) * double(Vp) * 2;
  std::printf(
      "{\"bench\":\"classifier_loss\",\"impl\":\"minidl\",\"dtype\":\"bf16\",\"N\":%lld,"
      "\"V\":%lld,\"Vp\":%lld,\"fused_ms\":%.4f,\"unfused_ms\":%.4f,\"fused_gbps\":%.1f}\n",
      (long long)N, (long long)V, (long long)Vp, fused_ms, unfused_ms, bytes / fused_ms * 1e-6);
  std::fflush(stdout);
}

// gpt2-124m's other kernel rows: LayerNorm on the bf16 residual stream [12·1024, 768] (forward,
// and forward + backward with weight and bias gradients), the residual add + LayerNorm step
// (fused and unfused), and one fused AdamW step over the
// model's 124,475,904 f32 parameters in its 148 tensors' shapes (the PyTorch side: the same).
void bench_gpt2_rows(Device dev, cudaStream_t s, int reps, int iters) {
  const int64_t R = 12 * 1024, C = 768;
  Tensor x = randn({R, C}, kFloat32, dev).to(kBFloat16).requires_grad_();  // x:[R,C]
  Tensor w = ones({C}, kFloat32, dev).requires_grad_(),
         b = zeros({C}, kFloat32, dev).requires_grad_();
  Tensor g = randn({R, C}, kFloat32, dev).to(kBFloat16);
  Tensor out;
  const double ln_fwd = time_ms(
      [&] {
        NoGradGuard no_grad;
        out = layer_norm(x.to(kFloat32), {C}, w, b).out;
      },
      s, reps, iters);
  const double ln_fwd_bwd = time_ms(
      [&] {
        out = layer_norm(x.to(kFloat32), {C}, w, b).out;
        out.backward(g.to(kFloat32));
      },
      s, reps, iters);
  // A block's residual step under autocast: s = x + y (the f32 stream plus a bf16 branch),
  // n = layer_norm(s) as bf16 rows for the next Linear; forward + backward from both s's and
  // n's gradients. Fused: one add_layer_norm node; unfused: add, layer_norm and the cast.
  Tensor xs = randn({R, C}, kFloat32, dev).requires_grad_();
  Tensor gs = randn({R, C}, kFloat32, dev);
  const auto residual_step = [&](bool fused) {
    for (Tensor* t : {&x, &xs, &w, &b}) t->set_grad(Tensor());
    Tensor sum, normed;
    if (fused) {
      AddLayerNormResult r = add_layer_norm(xs, x, {C}, w, b, 1e-5, kBFloat16);
      sum = r.sum, normed = r.out;
    } else {
      sum = xs + x;
      normed = layer_norm(sum, {C}, w, b).out.to(kBFloat16);
    }
    autograd::run_backward({sum, normed}, {gs, g}, false);
  };
  const double res_fused = time_ms([&] { residual_step(true); }, s, reps, iters);
  const double res_unfused = time_ms([&] { residual_step(false); }, s, reps, iters);
  // GPT-2 124M's parameters: wte [50304,768], wpe [1024,768], 12 blocks of ln_1, c_attn,
  // c_proj, ln_2, c_fc, mlp.c_proj (weights and biases), ln_f.
  std::vector<Shape> shapes = {{50304, 768}, {1024, 768}};
  for (int l = 0; l < 12; ++l)
    for (const Shape& sh : std::vector<Shape>{{768},
                                              {768},
                                              {2304, 768},
                                              {2304},
                                              {768, 768},
                                              {768},
                                              {768},
                                              {768},
                                              {3072, 768},
                                              {3072},
                                              {768, 3072},
                                              {768}})
      shapes.push_back(sh);
  shapes.push_back({768});
  shapes.push_back({768});
  std::vector<Tensor> ps;
  int64_t numel = 0;
  for (const Shape& sh : shapes) {
    Tensor p = randn(sh, kFloat32, dev).requires_grad_();
    p.set_grad(randn(sh, kFloat32, dev));
    numel += p.numel();
    ps.push_back(p);
  }
  optim::AdamW opt(ps, 6e-4, {0.9, 0.95}, 1e-8, 0.1);
  const double adam = time_ms([&] { opt.step(); }, s, reps, std::max(1, iters / 4));
  std::printf(
      "{\"bench\":\"gpt2_rows\",\"impl\":\"minidl\",\"ln_shape\":\"[%lld,%lld] bf16 in, f32 "
      "compute\",\"ln_fwd_ms\":%.4f,\"ln_fwd_bwd_ms\":%.4f,\"res_ln_ms\":%.4f,"
      "\"res_ln_unfused_ms\":%.4f,\"adamw_params\":%lld,\"adamw_tensors\":%zu,"
      "\"adamw_ms\":%.4f}\n",
      (long long)R, (long long)C, ln_fwd, ln_fwd_bwd, res_fused, res_unfused, (long long)numel,
      ps.size(), adam);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = bench::int_arg(argc, argv, "--reps", 7);
  const int iters = bench::int_arg(argc, argv, "--iters", 20);
  const int64_t mb = bench::int_arg(argc, argv, "--mb", 64);  // bytes per f32 operand
  const int index = bench::int_arg(argc, argv, "--device", 0);
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device\n");
    return 1;
  }
  try {
    cuda::set_device(index);
    const Device dev(DeviceType::cuda, index);
    auto s = static_cast<cudaStream_t>(cuda::current_stream(index));
    manual_seed(0);

    // GEMM: the square case and the two MLP products of a GPT-2-small-sized transformer layer.
    bench_gemm(8192, 8192, 8192, dev, s, reps, 5);
    bench_gemm(8192, 3072, 768, dev, s, reps, iters);  // [8192,768] x [768,3072]
    bench_gemm(8192, 768, 3072, dev, s, reps, iters);  // [8192,3072] x [3072,768]

    // Device-to-device copy bandwidth (read + write) on operands of the benchmark's size.
    const int64_t n = mb * (1 << 20) / 4;  // f32 elements per operand
    Tensor src = randn({n}, kFloat32, dev), dst = empty({n}, kFloat32, dev);
    const double bytes = double(n) * 4;
    const double t_copy = time_ms(
        [&] {
          BENCH_CUDA(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(bytes),
                                     cudaMemcpyDeviceToDevice, s));
        },
        s, reps, iters);
    const double copy_gbps = 2 * bytes / (t_copy * 1e-3) * 1e-9;
    std::printf(
        "{\"bench\":\"membw\",\"kernel\":\"cudaMemcpy D2D\",\"bytes\":%.0f,\"ms\":%.4f,"
        "\"gbps\":%.1f}\n",
        2 * bytes, t_copy, copy_gbps);

    const std::string flat = "[" + std::to_string(n) + "]";
    Tensor other = randn({n}, kFloat32, dev), out;
    report_bw("add", flat, 3 * bytes, time_ms([&] { out = add(src, other); }, s, reps, iters),
              copy_gbps);

    const int64_t cols = 1024, rows = n / cols;  // x:[rows,1024]
    const std::string rc = "[" + std::to_string(rows) + ",1024]";
    Tensor x = src.view({rows, cols}), w = ones({cols}, kFloat32, dev),
           bias = zeros({cols}, kFloat32, dev);
    // Reads x, writes y (+ mean and rstd per row).
    report_bw("layer_norm", rc, 2 * bytes + double(rows) * 8,
              time_ms([&] { out = layer_norm(x, {cols}, w, bias).out; }, s, reps, iters),
              copy_gbps);
    report_bw("softmax", rc, 2 * bytes, time_ms([&] { out = softmax(x, -1); }, s, reps, iters),
              copy_gbps);
    report_bw("log_softmax", rc, 2 * bytes,
              time_ms([&] { out = log_softmax(x, -1); }, s, reps, iters), copy_gbps);
    report_bw("softmax_backward", rc, 3 * bytes,
              time_ms([&] { out = softmax_backward(x, x, -1); }, s, reps, iters), copy_gbps);
    // Reductions read their input once (the outputs are small).
    report_bw("sum", flat, bytes, time_ms([&] { out = sum(src); }, s, reps, iters), copy_gbps);
    report_bw("amax", flat, bytes, time_ms([&] { out = amax(src); }, s, reps, iters), copy_gbps);
    report_bw("var", flat, bytes, time_ms([&] { out = var(src); }, s, reps, iters), copy_gbps);
    report_bw("sum dim1", rc, bytes, time_ms([&] { out = sum(x, {1}); }, s, reps, iters),
              copy_gbps);
    report_bw("sum dim0", rc, bytes, time_ms([&] { out = sum(x, {0}); }, s, reps, iters),
              copy_gbps);
    report_bw("logsumexp dim1", rc, bytes,
              time_ms([&] { out = logsumexp(x, {1}); }, s, reps, iters), copy_gbps);
    report_bw("max(dim) dim1", rc, bytes, time_ms([&] { out = max(x, 1).first; }, s, reps, iters),
              copy_gbps);
    const Tensor xh = x.to(kFloat16);
    report_bw("sum", rc, bytes / 2, time_ms([&] { out = sum(xh); }, s, reps, iters), copy_gbps,
              "f16");
    report_bw("softmax", rc, bytes, time_ms([&] { out = softmax(xh, -1); }, s, reps, iters),
              copy_gbps, "f16");

    // AdamW (fused multi-tensor step) on one parameter of `mb` MB: reads p, g, m, v; writes
    // p, m, v.
    Tensor p = randn({n}, kFloat32, dev).requires_grad_();
    p.set_grad(randn({n}, kFloat32, dev));
    optim::AdamW opt({p}, 1e-3, {0.9, 0.999}, 1e-8, 1e-2);
    report_bw("adamw_step", flat, 7 * bytes, time_ms([&] { opt.step(); }, s, reps, iters),
              copy_gbps);

    // Attention at gpt --preset gpt2-124m's shape (batch 12, 12 heads, 1024 tokens, head 64):
    // the flash (mma.sync) kernels, the same with 32-bit fragment loads (before ldmatrix), then
    // the WMMA kernels they replaced.
    bench_sdpa(12, 12, 1024, 64, dev, s, reps, std::max(1, iters / 4), "minidl");
    variants::set_unfused("flash_ldmatrix");
    bench_sdpa(12, 12, 1024, 64, dev, s, reps, std::max(1, iters / 4), "minidl_flash_ld32");
    variants::set_unfused("flash_attention");
    bench_sdpa(12, 12, 1024, 64, dev, s, reps, std::max(1, iters / 4), "minidl_wmma");
    variants::set_unfused("");
    // The classifier + loss of gpt2-124m at batch 8 x 1024 tokens.
    bench_classifier(8 * 1024, 50257, 50304, dev, s, reps, std::max(1, iters / 4));
    bench_gpt2_rows(dev, s, reps, iters);
    cuda::synchronize(index);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_kernels: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
