// Guide example (docs/guide.md, "When the model does not fit"): FullyShardedDataParallel by
// hand, as with torch.distributed.fsdp: a small transformer language model whose blocks are
// units (FULL_SHARD), AdamW over this rank's shards, the sharded clip_grad_norm_, and a full
// state dict that loads into the plain, unwrapped model.
// Usage: minidl-run -n 2 fsdp_lm [STEPS] [full|grad-op|no-shard]
#include <cstdio>
#include <string>

#include "minidl.h"
using namespace minidl;

namespace {
// Tokens 0..V-1; each sequence counts up from a random start, modulo V (learnable).
constexpr int64_t V = 32, T = 16, C = 32;

struct TinyLM : nn::Cloneable<TinyLM> {
  std::shared_ptr<nn::Embedding> wte = std::make_shared<nn::Embedding>(V, C);
  std::shared_ptr<nn::Embedding> wpe = std::make_shared<nn::Embedding>(T, C);
  std::shared_ptr<nn::ModuleListOf<nn::TransformerBlock>> h =
      std::make_shared<nn::ModuleListOf<nn::TransformerBlock>>();
  std::shared_ptr<nn::LayerNorm> ln_f = std::make_shared<nn::LayerNorm>(C);
  std::shared_ptr<nn::Linear> lm_head = std::make_shared<nn::Linear>(C, V, false);
  TinyLM() {
    for (int i = 0; i < 4; ++i) h->push_back(std::make_shared<nn::TransformerBlock>(C, 4));
    lm_head->weight = wte->weight;  // tied, as GPT-2's
    register_module("wte", &wte);
    register_module("wpe", &wpe);
    register_module("h", &h);
    register_module("ln_f", &ln_f);
    register_module("lm_head", &lm_head);
  }
  Tensor forward(const Tensor& idx) override {  // idx:[B,T] -> logits:[B,T,V]
    Tensor x = (*wte)(idx) + (*wpe)(arange(T));
    for (const auto& block : *h) x = (*block)(x);  // through operator(): FSDP's unit hooks
    return (*lm_head)((*ln_f)(x));
  }
};

// x, y:[8,T] int64 for this rank and step.
std::pair<Tensor, Tensor> batch(int rank, int64_t step) {
  Generator gen(dist::rank_seed(uint64_t(step), rank));
  Tensor start = randint(0, V, {8, 1}, kInt64, kCPU, &gen);
  Tensor count = start + arange(T + 1).unsqueeze(0);
  Tensor seq = count - floor_divide(count, Scalar(V)) * Scalar(V);  // count mod V
  return {seq.narrow(1, 0, T).contiguous(), seq.narrow(1, 1, T).contiguous()};
}
}  // namespace

int main(int argc, char** argv) try {
  const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 60;
  const std::string mode = argc > 2 ? argv[2] : "full";
  const dist::ShardingStrategy strategy = mode == "grad-op" ? dist::ShardingStrategy::SHARD_GRAD_OP
                                          : mode == "no-shard" ? dist::ShardingStrategy::NO_SHARD
                                                               : dist::ShardingStrategy::FULL_SHARD;
  // [snippet:fsdp]
  dist::init_process_group();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher
  const int rank = dist::get_rank();
  set_num_threads(1);

  manual_seed(0);
  auto model = std::make_shared<TinyLM>();
  auto fsdp = std::make_shared<dist::FSDP>(
      model, nullptr,
      dist::FSDPOptions{.sharding_strategy = strategy,  // FULL_SHARD: ZeRO-3
                        .auto_wrap_policy = dist::module_wrap_policy<nn::TransformerBlock>()});
  optim::AdamW opt(fsdp->parameters(), 3e-3);  // this rank's shards only

  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = batch(rank, step);
    Tensor logits = (*fsdp)(x);
    Tensor loss = cross_entropy(logits.view({-1, V}), y.view({-1}));
    opt.zero_grad();
    loss.backward();             // each block's gradients are reduce-scattered as backward goes
    fsdp->clip_grad_norm_(1.0);  // the norm over every rank's shards
    opt.step();
    last = dist::all_reduce_mean(loss.item<double>());
    if (step == 0) first = last;
  }
  // The whole model under its own names, gathered (collective); rank 0 writes it.
  const nn::StateDict full = fsdp->full_state_dict();
  dist::save_on_main([&] { save_safetensors(full, "fsdp_lm.safetensors"); });
  // [/snippet]
  // The file loads into a plain, unwrapped TinyLM, which computes the same logits.
  auto plain = std::make_shared<TinyLM>();
  nn::load_weights("fsdp_lm.safetensors", *plain);
  auto [x, y] = batch(0, 0);
  Tensor want, got;
  {
    NoGradGuard ng;
    want = (*plain)(x);
    got = (*fsdp)(x);
  }
  const double diff = max(abs(want - got)).item<double>();
  const double mib = double(fsdp->sharded_state_bytes()) / (1 << 20);
  const double full_mib = 2.0 * double(model->num_parameters()) * 4 / (1 << 20);
  const bool ok = last < 0.5 * first && diff < 1e-5;
  dist::printf_main(
      "fsdp_lm: %s, %lld steps, loss %.3f -> %.3f, plain model logits differ by %.2g; "
      "parameters+gradients per rank %.3f MiB (unsharded %.3f MiB): %s\n",
      dist::sharding_strategy_name(strategy).c_str(), (long long)steps, first, last, diff, mib,
      full_mib, ok ? "ok" : "FAILED");
  dist::destroy_process_group();
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fsdp_lm: error: %s\n", e.what());
  return 2;
}
