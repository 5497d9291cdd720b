// dist::ZeroRedundancyOptimizer state dicts on forked gloo ranks: consolidated on 2 ranks equal to
// the plain optimizer's and resumed on 3, sharded dicts merged across world sizes, and training
// checkpoints (consolidate, save on rank 0, load_checkpoint on every rank, rollback of a bad load).
#include <doctest/doctest.h>

#include "ddp_test_util.h"
#include "dist_test_util.h"
#include "optim/checkpoint.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "skip.h"
#include "zero_test_util.h"

#if MINIDL_WITH_GLOO  // the ranks talk through the gloo backend

using namespace minidl;
using namespace minidl::dist;
using namespace ddptest;
using namespace zerotest;
using disttest::contains;

TEST_SUITE("zero_redundancy_optimizer") {
  TEST_CASE(
      "ZeRO: state dict consolidated on 2 ranks equals the plain one and resumes on 3 ranks") {
    TempDir dir;
    double* sh = shared_doubles();
    for (int k = 0; k < 8; ++k) sh[k] = -1;
    // Phase A: 2 ranks, 6 steps; consolidated and sharded dicts saved.
    run_ranks(2, [&dir](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(11);
      auto mz = std::make_shared<Mlp>();
      auto mp = clone_of(*mz);
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      auto zero = make_zero(Kind::adam, *mz, pg);
      auto plain = make_plain(Kind::adam, *mp);
      for (int s = 0; s < 6; ++s) {
        train_step(dz, *zero, s, rank, 2);
        train_step(dp, *plain, s, rank, 2);
      }
      bool ok =
          report(rank, bitwise_equal(flat(mz->parameters()), flat(mp->parameters())), "params");
      zero->consolidate_state_dict(0);
      if (rank == 0) {
        const auto sd = zero->state_dict(), psd = plain->state_dict();
        shared_doubles()[0] = state_dict_diff(sd, psd);
        shared_doubles()[1] = double(sd.size());
        save_safetensors(sd, dir.file("zero_full.safetensors"));
        save_safetensors(psd, dir.file("plain.safetensors"));
        save_safetensors(mp->state_dict(), dir.file("model.safetensors"));
      } else {
        bool threw = false;
        try {
          zero->state_dict();
        } catch (const Error& e) {
          threw = contains(e.what(), "consolidate_state_dict") && contains(e.what(), "rank 1");
        }
        ok = report(rank, threw, "state_dict() without consolidation on this rank throws") && ok;
      }
      save_safetensors(zero->local_state_dict(), dir.file("shard" + std::to_string(rank) + ".st"));
      return ok;
    });
    CHECK(sh[0] == 0.0);
    CHECK(sh[1] > 8);
    MESSAGE("consolidated (2 ranks) vs plain: " << sh[1] << " keys, max diff " << sh[0]);
    // Phase B: 3 ranks load the consolidated dict (z1) or the two shards (z2) and continue; the
    // plain optimizer continues from its own dict.
    run_ranks(3, [&dir](int rank, std::shared_ptr<ProcessGroup> pg) {
      auto m1 = std::make_shared<Mlp>();
      m1->load_state_dict(load_safetensors(dir.file("model.safetensors")));
      auto m2 = clone_of(*m1), m3 = clone_of(*m1);
      DistributedDataParallel d1(m1, pg), d2(m2, pg), d3(m3, pg);
      auto z1 = make_zero(Kind::adam, *m1, pg);
      auto z2 = make_zero(Kind::adam, *m2, pg);
      auto plain = make_plain(Kind::adam, *m3);
      z1->load_state_dict(load_safetensors(dir.file("zero_full.safetensors")));
      z2->load_sharded_state_dicts(
          {load_safetensors(dir.file("shard0.st")), load_safetensors(dir.file("shard1.st"))});
      plain->load_state_dict(load_safetensors(dir.file("plain.safetensors")));
      for (int s = 6; s < 12; ++s) {
        train_step(d1, *z1, s, rank, 3);
        train_step(d2, *z2, s, rank, 3);
        train_step(d3, *plain, s, rank, 3);
      }
      const Tensor p3 = flat(m3->parameters());
      shared_doubles()[2 + rank] = std::max(max_abs_diff(flat(m1->parameters()), p3),
                                            max_abs_diff(flat(m2->parameters()), p3));
      bool ok = report(rank, bitwise_equal(flat(m1->parameters()), p3), "consolidated resume");
      ok = report(rank, bitwise_equal(flat(m2->parameters()), p3), "sharded resume") && ok;
      z2->consolidate_state_dict(2);
      if (rank == 2)
        ok = report(rank, state_dict_diff(z2->state_dict(), plain->state_dict()) == 0,
                    "consolidated on rank 2 of 3 equals the plain dict") &&
             ok;
      return ok;
    });
    for (int r = 0; r < 3; ++r) CHECK(sh[2 + r] == 0.0);
  }

  TEST_CASE("ZeRO: training checkpoints: save on rank 0 of 2, load_checkpoint on 3 ranks") {
    TempDir dir;
    double* sh = shared_doubles();
    for (int k = 0; k < 3; ++k) sh[k] = -1;
    run_ranks(2, [&dir](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(12);
      auto mz = std::make_shared<Mlp>();
      auto mp = clone_of(*mz);
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      auto zero = make_zero(Kind::adamw, *mz, pg);
      auto plain = make_plain(Kind::adamw, *mp);
      for (int s = 0; s < 4; ++s) {
        train_step(dz, *zero, s, rank, 2);
        train_step(dp, *plain, s, rank, 2);
      }
      zero->consolidate_state_dict(0);  // every rank, then rank 0 writes
      if (rank == 0) {
        nn::save_checkpoint(dir.file("zero.ckpt"), *mz, zero.get());
        nn::save_checkpoint(dir.file("plain.ckpt"), *mp, plain.get());
      }
      pg->barrier()->wait();
      return true;
    });
    run_ranks(3, [&dir](int rank, std::shared_ptr<ProcessGroup> pg) {
      auto mz = std::make_shared<Mlp>(), mp = std::make_shared<Mlp>();
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      auto zero = make_zero(Kind::adamw, *mz, pg);
      auto plain = make_plain(Kind::adamw, *mp);
      // A failed load (a checkpoint of another model) leaves the shard as it was: the rollback
      // snapshots the local shard, not the (unconsolidated) whole dict.
      auto other = std::make_shared<Mlp>(24);
      auto other_opt = make_plain(Kind::adamw, *other);
      if (rank == 0) nn::save_checkpoint(dir.file("other.ckpt"), *other, other_opt.get());
      pg->barrier()->wait();
      bool ok = true;
      try {
        nn::load_checkpoint(dir.file("other.ckpt"), *mz, zero.get());
        ok = report(rank, false, "a mismatching checkpoint loaded");
      } catch (const Error& e) {
        ok = report(rank, contains(e.what(), "other.ckpt"), e.what()) && ok;
      }
      nn::load_checkpoint(dir.file("zero.ckpt"), *mz, zero.get());
      nn::load_checkpoint(dir.file("plain.ckpt"), *mp, plain.get());
      for (int s = 4; s < 8; ++s) {
        train_step(dz, *zero, s, rank, 3);
        train_step(dp, *plain, s, rank, 3);
      }
      shared_doubles()[rank] = max_abs_diff(flat(mz->parameters()), flat(mp->parameters()));
      return report(rank, bitwise_equal(flat(mz->parameters()), flat(mp->parameters())),
                    "resumed like the plain optimizer") &&
             ok;
    });
    for (int r = 0; r < 3; ++r) CHECK(sh[r] == 0.0);
  }

}  // TEST_SUITE

#endif  // MINIDL_WITH_GLOO
