// The GPT-2 124M training step under every fused path and under each one's predecessor
// (MINIDL_UNFUSED, tensor/variants.h), in ONE process: one GPU call times every variant (issue
// 40). The step is gpt's: zero_grad, forward under autocast with the loss (GPT::forward(idx,
// targets) or, unfused, f32 logits + cross_entropy), backward, clip_grad_norm_, fused AdamW.
// Rounds cycle through the variants; per variant the best round's ms/step, tokens/s, MFU
// (llm.c's 6·N + 6·L·C·T FLOPs per token, --peak-tflops), dispatches and host reads per step.
// Usage: bench_gpt_variants [--device cuda|cpu] [--amp bf16|off] [--batch-size 12]
//   [--seq-len 1024] [--steps 10] [--warmup 3] [--rounds 2] [--peak-tflops 989]
//   [--n-layer L --n-embd C --n-head H] [--variants ",classifier_loss,all"] [--threads N]
// Prints one JSON line per variant as it finishes, then a markdown table.
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/gpt/model.h"
#include "bench_common.h"
#include "minidl.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"

using namespace minidl;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ';')) out.push_back(item);
  return out;
}

struct Row {
  std::string variant;
  double ms = 1e30;  // best round
  int64_t dispatches = -1, host_reads = -1;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string device = bench::str_arg(argc, argv, "--device", "cuda");
  const std::string amp = bench::str_arg(argc, argv, "--amp", "bf16");
  const int64_t B = bench::int_arg(argc, argv, "--batch-size", 12);
  const int steps = bench::int_arg(argc, argv, "--steps", 10);
  const int warmup = bench::int_arg(argc, argv, "--warmup", 3);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 2);
  if (const int threads = bench::int_arg(argc, argv, "--threads", 0); threads > 0)
    set_num_threads(threads);  // CPU threads (torch.set_num_threads); 0: every core
  const double peak = std::atof(bench::str_arg(argc, argv, "--peak-tflops", "0").c_str()) * 1e12;
  // ';'-separated MINIDL_UNFUSED lists ("" = every fused path on; "all" = every predecessor);
  // "+residual_bf16": every fused path on and the residual stream in bf16 (gpt --residual-dtype)
  const std::string default_variants =
      ";+residual_bf16;classifier_loss;qkv_attention;autocast_linear;autocast_weight_copies;"
      "residual_layer_norm;linear_gelu;mlp_dgelu;flash_attention;flash_ldmatrix;"
      "embedding_grad_add;linear_wgrad;foreach_clip;all";
  const std::vector<std::string> variants =
      split(bench::str_arg(argc, argv, "--variants", default_variants));
  try {
    gpt::GPTConfig cfg = gpt::gpt2_124m_config();
    cfg.n_layer = bench::int_arg(argc, argv, "--n-layer", int(cfg.n_layer));
    cfg.n_embd = bench::int_arg(argc, argv, "--n-embd", int(cfg.n_embd));
    cfg.n_head = bench::int_arg(argc, argv, "--n-head", int(cfg.n_head));
    const int64_t T = bench::int_arg(argc, argv, "--seq-len", int(cfg.block_size));
    MINIDL_CHECK(T <= cfg.block_size, "--seq-len ", T, " exceeds the block size ", cfg.block_size);
    const Device dev = device == "cpu" ? Device(kCPU) : Device(DeviceType::cuda, 0);
    MINIDL_CHECK(dev.is_cpu() || cuda::is_available(), "bench_gpt_variants: no CUDA device");
    manual_seed(1337);
    auto model = std::make_shared<gpt::GPT>(cfg);
    model->init_weights();
    model->to(dev);
    model->train();
    const std::vector<Tensor> params = model->parameters();
    optim::AdamW opt(params, 6e-4, {0.9, 0.95}, 1e-8, 0.1);
    // x:[B,T] y:[B,T] seeded uniform tokens of the real vocabulary (gpt --data synthetic)
    const Tensor seq = randint(0, cfg.vocab_size, {B, T + 1}, kInt64, dev);
    const Tensor x = seq.narrow(1, 0, T).contiguous(), y = seq.narrow(1, 1, T).contiguous();
    Tensor loss_sum = zeros({}, kFloat32, dev);
    auto step = [&] {
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<amp::autocast> ac;
        if (amp == "bf16") ac.emplace(dev.type, kBFloat16);
        if (variants::fused("classifier_loss")) {
          loss = (*model)(x, y);
        } else {
          const Tensor logits = model->forward(x);  // [B,T,V]
          loss = cross_entropy(logits.to(kFloat32).reshape({-1, cfg.vocab_size}), y.reshape({-1}));
        }
      }
      loss.backward();
      optim::clip_grad_norm_(params, 1.0);
      opt.step();
      loss_sum = add(loss_sum, loss.detach().to(kFloat32));
    };
    auto sync = [&] { (void)loss_sum.item<double>(); };

    const double fpt = cfg.flops_per_token(T), tokens = double(B * T);
    // One JSON line per variant as soon as its last round ends (a cut-off run keeps those).
    auto emit = [&](const Row& row) {
      const double tps = tokens / (row.ms * 1e-3);
      std::printf(
          "{\"bench\":\"gpt_variants\",\"unfused\":\"%s\",\"ms_per_step\":%.3f,"
          "\"tokens_per_s\":%.0f,\"mfu\":%.4f,\"dispatches\":%lld,\"host_reads\":%lld,"
          "\"batch\":%lld,\"seq_len\":%lld,\"amp\":\"%s\",\"device\":\"%s\"}\n",
          row.variant.c_str(), row.ms, tps, peak > 0 ? tps * fpt / peak : -1.0,
          (long long)row.dispatches, (long long)row.host_reads, (long long)B, (long long)T,
          amp.c_str(), dev.str().c_str());
      std::fflush(stdout);
    };
    std::vector<Row> rows;
    for (const std::string& v : variants) rows.push_back({v});
    // The process's first steps pay one-time costs (GEMM plans, the allocator's pools, lazy
    // state): they run before any variant is timed.
    for (int i = 0; i < warmup; ++i) step();
    sync();
    for (int r = 0; r < rounds; ++r) {
      for (Row& row : rows) {
        const bool residual_bf16 = row.variant == "+residual_bf16";
        model->residual_dtype = residual_bf16 ? kBFloat16 : kFloat32;
        variants::set_unfused(residual_bf16 ? "" : row.variant);
        amp::clear_autocast_cache();
        for (int i = 0; i < warmup; ++i) step();
        sync();
        const double t0 = bench::now_s();
        for (int i = 0; i < steps; ++i) step();
        sync();
        row.ms = std::min(row.ms, (bench::now_s() - t0) * 1e3 / steps);
        if (r == 0) {  // the op graph of one step, counted with the profiler on
          profiler::enable(true);
          const int64_t d0 = profiler::dispatch_count(), h0 = profiler::host_read_count();
          step();
          row.dispatches = profiler::dispatch_count() - d0;
          row.host_reads = profiler::host_read_count() - h0;
          profiler::enable(false);
          sync();
        }
        if (r == rounds - 1) emit(row);
      }
    }
    variants::set_unfused("");
    std::printf(
        "\nbench_gpt_variants: GPT %s, batch %lld x %lld tokens, amp %s, %s; best of %d "
        "rounds of %d steps (after %d warm-up steps each)\n\n",
        cfg.describe().c_str(), (long long)B, (long long)T, amp.c_str(), dev.str().c_str(), rounds,
        steps, warmup);
    std::printf(
        "| MINIDL_UNFUSED | ms/step | tokens/s | MFU | vs all fused | dispatches/step | "
        "host reads/step |\n|---|---|---|---|---|---|---|\n");
    const double base = rows.empty() ? 0 : rows[0].ms;
    for (const Row& row : rows) {
      const double tps = tokens / (row.ms * 1e-3);
      char mfu[32] = "-";
      if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * tps * fpt / peak);
      std::printf("| %s | %.2f | %.0f | %s | %.3fx | %lld | %lld |\n",
                  row.variant.empty() ? "(none: every fused path)" : row.variant.c_str(), row.ms,
                  tps, mfu, row.ms / base, (long long)row.dispatches, (long long)row.host_reads);
    }
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt_variants: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
