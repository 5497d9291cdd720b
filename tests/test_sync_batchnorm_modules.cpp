// nn::SyncBatchNorm as a module: convert_sync_batchnorm (every BatchNorm replaced, names, values
// and tensors kept, state_dicts both ways, typed member slots named) and revert_sync_batchnorm,
// bitwise BatchNorm results without a group, on one rank, in eval mode and inside DataParallel
// (no collective issued), AMP O2, and DDP training on 2 ranks with uneven batches whose
// parameters and buffers stay bitwise equal.
#include <doctest/doctest.h>

#include "ddp_test_util.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/sync_batchnorm/sync_batchnorm.h"
#include "parallel_test_models.h"
#include "test_util.h"

#if MINIDL_WITH_GLOO  // the ranks talk through the gloo backend

using namespace minidl;
using namespace minidl::dist;
using namespace ddptest;
using testutil::bitwise_equal;
using testutil::random_tensor;

namespace {

// conv3x3 -> BatchNorm2d -> relu, the BatchNorm in a member declared std::shared_ptr<Module>.
struct Block : nn::Cloneable<Block> {
  std::shared_ptr<nn::Module> conv, bn;
  Block() {
    conv = std::make_shared<nn::Conv2d>(2, 4, 3);
    bn = std::make_shared<nn::BatchNorm2d>(4);
    register_module("conv", &conv);
    register_module("bn", &bn);
  }
  Tensor forward(const Tensor& x) override { return relu(bn->forward(conv->forward(x))); }
  std::string name() const override { return "Block"; }
};

// x:[B,2,6,6] -> Block [B,4,4,4] -> flatten [B,64] -> (linear, BatchNorm1d, relu) [B,8] -> [B,3]
std::shared_ptr<nn::Module> make_net() {
  auto head = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 8), std::make_shared<nn::BatchNorm1d>(8),
      std::make_shared<nn::ReLU>()});
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<Block>(), std::make_shared<nn::Flatten>(), head,
      std::make_shared<nn::Linear>(8, 3)});
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  FAIL("no parameter ", name);
  return {};
}

void set_affine(nn::Module& m) {
  NoGradGuard no_grad;
  auto ps = m.parameters();
  const int64_t C = ps[0].numel();
  ps[0].copy_(random_tensor({C}, kFloat32, 7, 0.5, 1.5));
  ps[1].copy_(random_tensor({C}, kFloat32, 8, -1, 1));
}

// Two training steps (output, input and parameter gradients, buffers) and one eval forward of
// a and b on the same data: all bitwise equal.
bool same_steps(nn::Module& a, nn::Module& b, const Shape& shape) {
  bool ok = true;
  for (int s = 0; s < 2; ++s) {
    const Tensor x = random_tensor(shape, kFloat32, 50 + uint64_t(s), -1, 3);
    Tensor xa = x.clone(), xb = x.clone();
    xa.requires_grad_();
    xb.requires_grad_();
    const Tensor ya = a.forward(xa), yb = b.forward(xb);
    const Tensor G = random_tensor(ya.shape(), kFloat32, 60 + uint64_t(s));
    sum(mul(ya, G)).backward();
    sum(mul(yb, G)).backward();
    ok = ok && bitwise_equal(ya, yb) && bitwise_equal(xa.grad(), xb.grad());
    auto pa = a.parameters(), pb = b.parameters();
    for (size_t j = 0; j < pa.size(); ++j) ok = ok && bitwise_equal(pa[j].grad(), pb[j].grad());
    a.zero_grad();
    b.zero_grad();
  }
  auto ba = a.buffers(), bb = b.buffers();
  for (size_t j = 0; j < ba.size(); ++j) ok = ok && bitwise_equal(ba[j], bb[j]);
  a.eval();
  b.eval();
  const Tensor x = random_tensor(shape, kFloat32, 70);
  ok = ok && bitwise_equal(a.forward(x), b.forward(x));
  a.train();
  b.train();
  return ok;
}

}  // namespace

TEST_SUITE("sync_batchnorm") {
  TEST_CASE("sync_batchnorm: convert_sync_batchnorm replaces every BatchNorm, keeps names") {
    manual_seed(3);
    auto orig = make_net();
    auto model = orig->clone();
    nn::Module& bn1d = *model->named_modules()[7].second;  // head's BatchNorm1d: "2.1"
    REQUIRE(bn1d.name() == "BatchNorm1d");
    bn1d.parameters()[0].requires_grad_(false);
    const auto params_before = model->named_parameters();
    auto converted = nn::convert_sync_batchnorm(model);
    CHECK(converted == model);
    int syncs = 0;
    for (auto& [name, m] : converted->named_modules()) {
      CHECK(m->name() != "BatchNorm1d");
      CHECK(m->name() != "BatchNorm2d");
      syncs += m->name() == "SyncBatchNorm";
    }
    CHECK(syncs == 2);
    CHECK(converted->named_modules()[3].first == "0.bn");
    const auto params_after = converted->named_parameters();
    REQUIRE(params_after.size() == params_before.size());
    for (size_t j = 0; j < params_after.size(); ++j) {
      CHECK(params_after[j].first == params_before[j].first);
      CHECK(params_after[j].second.data_ptr() == params_before[j].second.data_ptr());  // shared
    }
    CHECK_FALSE(param(*converted, "2.1.weight").requires_grad());
    const auto sd = converted->state_dict(), sd_orig = orig->state_dict();
    REQUIRE(sd.size() == sd_orig.size());
    for (const auto& [key, t] : sd_orig) {
      REQUIRE(sd.count(key) == 1);
      CHECK(bitwise_equal(sd.at(key), t));
    }
    // state_dicts load both ways
    auto plain = make_net();
    auto res = plain->load_state_dict(converted->state_dict());
    CHECK(res.missing_keys.empty());
    CHECK(res.unexpected_keys.empty());
    auto other = nn::convert_sync_batchnorm(make_net());
    res = other->load_state_dict(orig->state_dict());
    CHECK(res.missing_keys.empty());
    CHECK(res.unexpected_keys.empty());
    // without a process group the converted model trains exactly like the original
    param(*converted, "2.1.weight").requires_grad_(true);
    CHECK(same_steps(*converted, *plain, {5, 2, 6, 6}));
    std::ostringstream printed;
    printed << *converted;
    CHECK(printed.str().find("(bn): SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, "
                             "track_running_stats=True)") != std::string::npos);
    // and back: the original classes, the same tensors
    auto back = nn::revert_sync_batchnorm(converted);
    CHECK(back == converted);
    const auto mods = back->named_modules();
    CHECK(mods[3].second->name() == "BatchNorm2d");
    CHECK(mods[7].second->name() == "BatchNorm1d");
    CHECK(param(*back, "2.1.weight").data_ptr() == param(*model, "2.1.weight").data_ptr());
    CHECK(same_steps(*back, *plain, {5, 2, 6, 6}));
  }

  TEST_CASE("sync_batchnorm: convert_sync_batchnorm on a root BatchNorm and typed members") {
    auto bn = std::make_shared<nn::BatchNorm1d>(5);
    auto root = nn::convert_sync_batchnorm(bn);
    CHECK(root->name() == "SyncBatchNorm");
    CHECK(root->parameters()[0].data_ptr() == bn->weight.data_ptr());
    CHECK(root->named_buffers()[2].first == "num_batches_tracked");
    CHECK(root->named_buffers()[2].second.dtype() == kInt64);
    auto reverted = nn::revert_sync_batchnorm(root);
    CHECK(reverted->name() == "BatchNorm1d");
    CHECK(reverted->parameters()[0].data_ptr() == bn->weight.data_ptr());
    CHECK(nn::revert_sync_batchnorm(std::make_shared<nn::SyncBatchNorm>(2))->name() ==
          "BatchNorm2d");
    // a member declared std::shared_ptr<BatchNorm2d> gets a BatchNorm2d that syncs
    auto net = std::make_shared<ptest::SmallNet>(true);
    const Tensor w = net->bn->weight;
    CHECK(nn::convert_sync_batchnorm(net) == net);
    auto* in = dynamic_cast<nn::SyncBatchNormIn<nn::BatchNorm2d>*>(net->bn.get());
    REQUIRE(in != nullptr);
    CHECK(net->bn->name() == "SyncBatchNorm");
    CHECK(net->bn->weight.data_ptr() == w.data_ptr());
    CHECK(net->named_parameters().size() == 6);
    nn::revert_sync_batchnorm(net);
    CHECK(net->bn->name() == "BatchNorm2d");
    CHECK(dynamic_cast<nn::SyncBatchNormIn<nn::BatchNorm2d>*>(net->bn.get()) == nullptr);
    CHECK(net->bn->weight.data_ptr() == w.data_ptr());
  }

  TEST_CASE("sync_batchnorm: a typed BatchNorm2d member synchronises after conversion") {
    ddptest::run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
      bool ok = true;
      for (bool convert : {true, false}) {
        manual_seed(5);
        auto net = std::make_shared<ptest::SmallNet>(true);
        if (convert) nn::convert_sync_batchnorm(net, pg);
        // Different data per rank: only synchronised statistics give equal running stats.
        net->forward(ptest::batch_x(rank, 3 + rank));
        ok = ddptest::report(rank, ddptest::same_on_all_ranks(*pg, net->bn->running_var) == convert,
                             convert ? "synchronised" : "control: local statistics") &&
             ok;
      }
      return ok;
    });
  }

  TEST_CASE("sync_batchnorm: dist::Join refuses a model with SyncBatchNorm, naming the layer") {
    ddptest::run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
      auto net = std::make_shared<ptest::SmallNet>(true);
      nn::convert_sync_batchnorm(net, pg);
      dist::DistributedDataParallel ddp(net, pg);
      try {
        dist::Join join(ddp);
      } catch (const Error& e) {
        return ddptest::report(
            rank, std::string(e.what()).find("SyncBatchNorm ('bn')") != std::string::npos,
            e.what());
      }
      return ddptest::report(rank, false, "Join accepted a SyncBatchNorm model");
    });
  }

  TEST_CASE("sync_batchnorm: AMP O2 keeps SyncBatchNorm in fp32, as BatchNorm") {
    auto model = nn::convert_sync_batchnorm(make_net());
    optim::SGD opt(model->parameters(), 0.1);
    auto a = amp::initialize(*model, opt, "O2", kBFloat16);
    CHECK(param(*model, "0.bn.weight").dtype() == kFloat32);
    CHECK(param(*model, "2.1.bias").dtype() == kFloat32);
    CHECK(param(*model, "0.conv.weight").dtype() == kBFloat16);
    CHECK(a->forward(*model, random_tensor({4, 2, 6, 6})).dtype() == kFloat32);
  }

  TEST_CASE("sync_batchnorm: no group, one rank, eval mode and DataParallel are BatchNorm") {
    {  // no process group and no default group
      nn::SyncBatchNorm s(3);
      nn::BatchNorm2d b(3);
      set_affine(s);
      set_affine(b);
      CHECK(same_steps(s, b, {4, 3, 2, 2}));
    }
    run_ranks(1, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      nn::SyncBatchNorm s(3, {}, pg);
      nn::BatchNorm1d b(3);
      set_affine(s);
      set_affine(b);
      const uint64_t seq = pg->sequence_number();
      bool ok = report(rank, same_steps(s, b, {4, 3, 5}), "one rank: bitwise BatchNorm");
      return report(rank, pg->sequence_number() == seq, "one rank: no collective") && ok;
    });
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      auto s = std::make_shared<nn::SyncBatchNorm>(3, nn::BatchNormOptions{}, pg);
      auto b = std::make_shared<nn::BatchNorm2d>(3);
      s->eval();
      b->eval();
      const uint64_t seq = pg->sequence_number();
      const Tensor x = random_tensor({4, 3, 2, 2}, kFloat32, 80 + uint64_t(rank));
      bool ok = report(rank, bitwise_equal(s->forward(x), b->forward(x)), "eval: bitwise");
      s->train();
      b->train();
      // replicas of one process: local statistics, no collective (a sync would deadlock here)
      DataParallel dps(s, {kCPU, kCPU}), dpb(b, {kCPU, kCPU});
      ok = report(rank, same_steps(dps, dpb, {6, 3, 2, 2}), "DataParallel: bitwise") && ok;
      return report(rank, pg->sequence_number() == seq, "eval, DataParallel: no collective") && ok;
    });
  }

  // DDP with SyncBatchNorm on 2 ranks with uneven batches and several buckets: the SyncBN
  // collectives (forward and backward) interleave with the reducer's; buffers are not broadcast,
  // yet parameters and running stats stay bitwise equal (a plain BatchNorm's would differ).
  TEST_CASE("sync_batchnorm: DDP training on 2 ranks keeps parameters and buffers equal") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      bool ok = true;
      for (bool sync : {true, false}) {
        manual_seed(5);
        auto model = sync ? nn::convert_sync_batchnorm(make_net(), pg) : make_net();
        DistributedDataParallel ddp(
            model, pg,
            DDPOptions{
                .bucket_cap_mb = 0.002, .first_bucket_mb = 0.0005, .broadcast_buffers = false});
        double first = 0, last = 0;
        for (int s = 0; s < 6; ++s) {
          const int64_t n = rank == 0 ? 3 : 5;
          const Tensor x =
              random_tensor({n, 2, 6, 6}, kFloat32, 300 + 10 * uint64_t(s + rank), -1, 2);
          const Tensor y = random_tensor({n}, kInt64, 400 + 10 * uint64_t(s + rank), 0, 3);
          Tensor loss = nn::functional::cross_entropy(ddp.forward(x), y);
          loss.backward();
          ptest::sgd_step(ddp, 0.05);
          (s == 0 ? first : last) = loss.item<double>();
        }
        const bool params = same_on_all_ranks(*pg, flat(model->parameters()));
        const bool buffers = same_on_all_ranks(*pg, flat(model->buffers()));
        ok = report(rank, params, "parameters bitwise equal") && ok;
        ok = report(rank, buffers == sync, sync ? "SyncBN buffers equal" : "BN buffers differ") &&
             ok;
        if (sync)
          ok = report(rank, std::isfinite(last) && std::isfinite(first), "finite loss") && ok;
      }
      return ok;
    });
  }

}  // TEST_SUITE

#endif  // MINIDL_WITH_GLOO
