// FSDP on one rank of a gloo group, on the CPU here and on a GPU in the `cuda_fsdp` suite (the
// GPU pack): the flat parameters, the release and re-gather of their memory through the
// device's allocator, the gather's autograd node, and training equal to the plain model.
#include <doctest/doctest.h>

#include "minidl.h"
#include "parallel/store/tcp_store.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::dist;

namespace {
struct Block : nn::Cloneable<Block> {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(24, 61);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(61, 24);
  Block() {
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return x + (*fc2)(gelu((*fc1)(x))); }
};
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::ModuleListOf<Block>> blocks = std::make_shared<nn::ModuleListOf<Block>>();
  std::shared_ptr<nn::Linear> head = std::make_shared<nn::Linear>(24, 7);
  Net() {
    for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<Block>());
    register_module("blocks", &blocks);
    register_module("head", &head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& b : *blocks) h = (*b)(h);
    return (*head)(h);
  }
};

// 5 AdamW steps of the plain model and of FSDP(strategy) over a one-rank group on `dev`.
void one_rank_trains_like_plain(Device dev, ShardingStrategy strategy) {
  auto store = std::make_shared<TcpStore>(TcpStoreOptions{.port = 0, .is_master = true});
  auto pg = make_process_group("gloo", store, 0, 1);
  manual_seed(8);
  auto plain = std::make_shared<Net>();
  plain->to(dev);
  manual_seed(8);
  auto model = std::make_shared<Net>();
  model->to(dev);
  auto fsdp = std::make_shared<FSDP>(
      model, pg,
      FSDPOptions{.sharding_strategy = strategy, .auto_wrap_policy = module_wrap_policy<Block>()});
  REQUIRE(fsdp->units().size() == 4);
  CHECK(fsdp->parameters()[0].device() == dev);
  optim::AdamW opt_plain(plain->parameters(), 1e-2), opt(fsdp->parameters(), 1e-2);
  for (int step = 0; step < 5; ++step) {
    Tensor x = testutil::random_tensor({8, 24}, kFloat32, uint64_t(step)).to(dev);
    Tensor y =
        testutil::random_tensor({8}, kFloat32, uint64_t(50 + step), 0, 6.99).to(kInt64).to(dev);
    opt_plain.zero_grad();
    Tensor want = cross_entropy((*plain)(x), y);
    want.backward();
    opt_plain.step();
    opt.zero_grad();
    Tensor got = cross_entropy((*fsdp)(x), y);
    if (strategy == ShardingStrategy::FULL_SHARD) CHECK_FALSE(fsdp->units()[0]->gathered());
    got.backward();
    for (const auto& u : fsdp->units())
      if (strategy != ShardingStrategy::NO_SHARD) CHECK_FALSE(u->gathered());
    opt.step();
    CHECK(got.item<double>() == doctest::Approx(want.item<double>()).epsilon(1e-6));
  }
  const nn::StateDict full = fsdp->full_state_dict();
  for (const auto& [name, t] : plain->state_dict()) {
    CAPTURE(name);
    testutil::check_close(full.at(name).to(kCPU), t.to(kCPU), 1e-5, 1e-6);
  }
}
}  // namespace

TEST_CASE("FSDP on one rank trains like the plain model (CPU)") {
  for (auto s :
       {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD})
    one_rank_trains_like_plain(kCPU, s);
}

TEST_SUITE("cuda_fsdp") {
  TEST_CASE("FSDP on one rank trains like the plain model (CUDA: release and re-gather)") {
    const Device gpu(DeviceType::cuda, 0);
    for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                   ShardingStrategy::NO_SHARD})
      one_rank_trains_like_plain(gpu, s);
    // The released memory goes back to the caching allocator.
    auto store = std::make_shared<TcpStore>(TcpStoreOptions{.port = 0, .is_master = true});
    auto pg = make_process_group("gloo", store, 0, 1);
    auto model = std::make_shared<Net>();
    model->to(gpu);
    auto fsdp = std::make_shared<FSDP>(
        model, pg, FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
    const int64_t before = cuda::memory_stats(0).allocated;
    Tensor loss = sum((*fsdp)(testutil::random_tensor({8, 24}, kFloat32, 1).to(gpu)));
    loss.backward();
    loss = Tensor();
    // Left after the backward: the shards' gradients (one rank: as large as the gathered
    // parameters). Without the release the gathered copies would stay too.
    int64_t gathered = 0;
    for (const auto& u : fsdp->units()) gathered += u->padded_numel() * 4;
    CHECK(cuda::memory_stats(0).allocated - before < gathered + gathered / 2);
  }
}
