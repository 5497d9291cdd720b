// Tied weights under data parallelism: a model whose output head shares the token embedding's
// weight trains under DataParallel (2 CPU replicas made by clone) and DDP (2 forked gloo ranks)
// exactly like one process on the global batch; the tied weight is reduced once.
#include <doctest/doctest.h>

#include "ddp_test_util.h"
#include "nn/embedding.h"
#include "nn/linear_conv.h"
#include "nn/loss.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel_test_models.h"
#include "skip.h"

using namespace minidl;
using namespace ptest;

namespace {
constexpr int64_t kVocab = 11, kEmbd = 6, kRows = 4, kSeq = 5;

// tokens:[B,T] int64 -> logits:[B,T,V]; lm_head.weight is wte.weight (one tensor, two uses).
struct TiedNet : nn::Cloneable<TiedNet> {
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> fc, lm_head;
  TiedNet() {
    wte = std::make_shared<nn::Embedding>(kVocab, kEmbd);
    fc = std::make_shared<nn::Linear>(kEmbd, kEmbd);
    lm_head = std::make_shared<nn::Linear>(kEmbd, kVocab, false);
    lm_head->weight = wte->weight;
    register_module("wte", &wte);
    register_module("fc", &fc);
    register_module("lm_head", &lm_head);
  }
  Tensor forward(const Tensor& idx) override { return (*lm_head)(tanh((*fc)((*wte)(idx)))); }
};

Tensor tokens(int step, int64_t rows) {
  return testutil::random_tensor({rows, kSeq}, kInt64, 300 + uint64_t(step), 0, kVocab);
}
Tensor targets(int step, int64_t rows) {
  return testutil::random_tensor({rows, kSeq}, kInt64, 400 + uint64_t(step), 0, kVocab);
}
Tensor lm_loss(nn::Module& m, const Tensor& x, const Tensor& y) {
  return nn::functional::cross_entropy(m.forward(x).reshape({-1, kVocab}), y.reshape({-1}));
}
double max_grad_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].first == pb[i].first);
    REQUIRE(pa[i].second.grad().defined());
    REQUIRE(pb[i].second.grad().defined());
    worst = std::max(worst, max(abs(sub(pa[i].second.grad(), pb[i].second.grad()))).item<double>());
  }
  return worst;
}
}  // namespace

TEST_CASE("data_parallel: a model with tied weights gives single-process gradients") {
  manual_seed(9);
  auto src = std::make_shared<TiedNet>();
  src->to(kFloat64);
  auto ref = src->clone();
  dist::DataParallel dp(src, {kCPU, kCPU});
  auto& rep = dynamic_cast<TiedNet&>(dp.replica(1));
  CHECK(rep.lm_head->weight.is_same(rep.wte->weight));  // the replica keeps the tie
  CHECK(rep.parameters().size() == 3);
  for (int s = 0; s < 3; ++s) {
    Tensor x = tokens(s, kRows), y = targets(s, kRows);
    lm_loss(dp, x, y).backward();
    lm_loss(*ref, x, y).backward();
    double err = max_grad_diff(*src, *ref);
    MESSAGE("DataParallel tied model, step " << s << ": max |grad diff| " << err);
    CHECK(err <= 1e-12);
    CHECK(src->lm_head->weight.grad().is_same(src->wte->weight.grad()));
    sgd_step(*src);
    sgd_step(*ref);
  }
  CHECK(max_rel_diff(src->state_dict(), ref->state_dict()) <= 1e-12);
}

#if MINIDL_WITH_GLOO
TEST_CASE("ddp: 2 ranks on a model with tied weights train like one process") {
  using namespace ddptest;
  run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
    manual_seed(100);
    auto ref = std::make_shared<TiedNet>();  // = rank 0's initial model
    manual_seed(100 + uint64_t(rank));
    auto model = std::make_shared<TiedNet>();
    dist::DistributedDataParallel ddp(model, pg,
                                      {.bucket_cap_mb = 0.0002, .first_bucket_mb = 0.0001});
    bool ok = report(rank, model->lm_head->weight.is_same(model->wte->weight), "tie kept");
    const int64_t per = kRows / 2;
    for (int s = 0; s < 5; ++s) {
      Tensor x = tokens(s, kRows), y = targets(s, kRows);
      lm_loss(ddp, x.narrow(0, rank * per, per), y.narrow(0, rank * per, per)).backward();
      for (int r = 0; r < 2; ++r)
        mul(lm_loss(*ref, x.narrow(0, r * per, per), y.narrow(0, r * per, per)), 0.5).backward();
      const double gerr = max_grad_diff(*model, *ref);
      ok = report(rank, gerr <= 1e-6, "gradients match the single process") && ok;
      sgd_step(ddp);
      sgd_step(*ref);
    }
    const double err = max_rel_diff(model->state_dict(), ref->state_dict());
    if (rank == 0) shared_doubles()[0] = err;
    ok = report(rank, err <= 1e-5, "weights match the reference") && ok;
    return report(rank, same_on_all_ranks(*pg, flat(model->parameters())),
                  "params bitwise equal") &&
           ok;
  });
  MESSAGE("DDP 2 ranks, tied model, 5 steps: max rel error vs single process "
          << ddptest::shared_doubles()[0]);
}
#else
TEST_CASE("ddp: the 2-rank tied-weights case needs Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif
