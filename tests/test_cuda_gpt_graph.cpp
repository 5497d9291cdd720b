// gpt --cuda-graph's step captured whole (apps/gpt/trainer.cpp): a tiny GPT's bf16 autocast
// forward through the fused classifier loss, backward, clip_grad_norm_ and fused AdamW, with
// the LR changing every step, replayed from a CUDA graph, against the same steps run eagerly.
// Runs on the next GPU (suite cuda_gpt_graph).
#include <doctest/doctest.h>

#include "apps/gpt/model.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Trace {
  std::vector<double> losses;
  std::vector<Tensor> params;  // CPU copies after the last step
};

// `steps` training steps on one fixed batch; with graph, the first 2 run eagerly, the third is
// captured and every later one is a replay. lr_k = 1e-3 * (1 + k / 10): a schedule the captured
// AdamW must pick up at each replay.
Trace train(bool graph, int steps) {
  gpt::GPTConfig cfg;
  cfg.block_size = 32, cfg.vocab_size = 50, cfg.padded_vocab_size = 64;
  cfg.n_layer = 2, cfg.n_head = 4, cfg.n_embd = 64;
  manual_seed(7);
  auto model = std::make_shared<gpt::GPT>(cfg);
  model->init_weights();
  model->to(Device(kCUDA));
  std::vector<Tensor> params = model->parameters();
  optim::AdamW opt(params, 1e-3, {0.9, 0.95}, 1e-8, 0.1);
  const Tensor seq = random_tensor({4, 33}, kFloat64, 8, 0, 50).to(kInt64).to(kCUDA);
  const Tensor x = seq.narrow(1, 0, 32).contiguous(), y = seq.narrow(1, 1, 32).contiguous();
  Tensor loss_acc = zeros({}, kFloat32, kCUDA);
  auto step = [&](const Tensor& xs, const Tensor& ys) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cuda, kBFloat16);
      loss = (*model)(xs, ys);
    }
    loss.backward();
    optim::clip_grad_norm_(params, 1.0);
    opt.step();
    return loss;
  };
  Trace t;
  cuda::CUDAGraph g;
  Tensor sx, sy, sloss;
  for (int k = 0; k < steps; ++k) {
    for (auto& group : opt.param_groups()) group.lr() = 1e-3 * (1.0 + k / 10.0);
    if (!graph || k < 2) {
      t.losses.push_back(step(x, y).item<double>());
      continue;
    }
    if (!g.captured()) {
      sx = x.clone(), sy = y.clone();
      opt.zero_grad(true);
      g.capture_begin();
      sloss = step(sx, sy).detach();
      g.capture_end();
    }
    g.replay();
    t.losses.push_back(sloss.item<double>());
  }
  for (const Tensor& p : params) t.params.push_back(p.detach().cpu());
  return t;
}

}  // namespace

TEST_SUITE("cuda_gpt_graph") {
  TEST_CASE("cuda graph: gpt's whole bf16 step (fused loss, clipping, AdamW) replays like eager") {
    const Trace eager = train(false, 7), replay = train(true, 7);
    REQUIRE(eager.losses.size() == replay.losses.size());
    for (size_t k = 0; k < eager.losses.size(); ++k) {
      CAPTURE(k);
      // (loose: bitwise equality of the captured and eager steps is not claimed)
      CHECK(replay.losses[k] == doctest::Approx(eager.losses[k]).epsilon(1e-3));
    }
    CHECK(eager.losses.back() < eager.losses.front());  // it trains
    REQUIRE(eager.params.size() == replay.params.size());
    for (size_t i = 0; i < eager.params.size(); ++i) {
      CAPTURE(i);
      check_close(replay.params[i], eager.params[i], 1e-3, 1e-4);
    }
  }
}
