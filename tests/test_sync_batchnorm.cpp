// nn::SyncBatchNorm on 2 and 3 forked gloo ranks with uneven batches (also an empty one) against
// one process's BatchNorm1d/2d on the concatenated batch (output, input/weight/bias gradients,
// running stats after 3 steps) in f64, f32 and bf16; a finite-difference gradcheck of the global
// loss across 2 ranks; errors naming ranks, channel counts and dtypes.
#include <doctest/doctest.h>

#include <numeric>
#include <optional>

#include "ddp_test_util.h"
#include "parallel/sync_batchnorm/sync_batchnorm.h"
#include "autograd/gradcheck.h"
#include "test_util.h"

#if MINIDL_WITH_GLOO  // the ranks talk through the gloo backend

using namespace minidl;
using namespace minidl::dist;
using namespace ddptest;
using testutil::random_tensor;

namespace {

// max |a - b| / max |b| (0 for empty tensors).
double rel_err(const Tensor& a, const Tensor& b) {
  if (b.numel() == 0) return 0;
  Tensor x = a.detach().to(kFloat64), y = b.detach().to(kFloat64);
  const double scale = std::max(max(abs(y)).item<double>(), 1e-300);
  return max(abs(sub(x, y))).item<double>() / scale;
}

struct Case {
  std::vector<int64_t> sizes;  // per-rank batch sizes
  Shape tail;                  // trailing dims after [N, C]
  DType dtype = kFloat64;
  bool bn1d = false;
  std::optional<double> momentum = 0.1;
  double tol = 1e-6;
  int slot = 0;  // shared_doubles()[slot .. slot+5]: max errors of y, dx, dw, db, running stats
};

void set_affine(nn::Module& m, int64_t C) {
  NoGradGuard no_grad;
  auto ps = m.named_parameters();
  ps[0].second.copy_(random_tensor({C}, kFloat32, 7, 0.5, 1.5));
  ps[1].second.copy_(random_tensor({C}, kFloat32, 8, -1, 1));
}

// 3 training steps of SyncBatchNorm on this rank's slice and of BatchNorm on the whole batch.
bool run_case(const Case& k, int rank, const std::shared_ptr<ProcessGroup>& pg) {
  const int64_t C = 3;
  const int64_t N = std::accumulate(k.sizes.begin(), k.sizes.end(), int64_t(0));
  const int64_t off = std::accumulate(k.sizes.begin(), k.sizes.begin() + rank, int64_t(0));
  const int64_t n = k.sizes[size_t(rank)];
  nn::BatchNormOptions opt;
  opt.momentum = k.momentum;
  std::shared_ptr<nn::Module> ref;
  if (k.bn1d)
    ref = std::make_shared<nn::BatchNorm1d>(C, opt);
  else
    ref = std::make_shared<nn::BatchNorm2d>(C, opt);
  auto sbn = std::make_shared<nn::SyncBatchNorm>(C, opt, pg);
  if (k.dtype == kFloat64) {  // f64 parameters and buffers too (bf16: f32 ones, as AMP O2)
    ref->to(kFloat64);
    sbn->to(kFloat64);
  }
  set_affine(*ref, C);
  set_affine(*sbn, C);
  Shape shape{N, C};
  shape.insert(shape.end(), k.tail.begin(), k.tail.end());
  double e[6] = {0, 0, 0, 0, 0, 0};
  bool ok = true;
  for (int s = 0; s < 3; ++s) {
    const Tensor xg =
        add(random_tensor(shape, kFloat64, 100 + uint64_t(s), -2, 2), 0.5).to(k.dtype);
    const Tensor G = random_tensor(shape, k.dtype, 200 + uint64_t(s));
    Tensor xr = xg.clone();
    xr.requires_grad_();
    const bool flat4 = !k.bn1d && xr.dim() != 4;  // [N,C,*] to BatchNorm2d as [N,C,S,1]
    const Tensor yr =
        flat4 ? ref->forward(xr.reshape({N, C, -1, 1})).reshape(xr.shape()) : ref->forward(xr);
    sum(mul(yr, G)).backward();
    Tensor xl = xg.narrow(0, off, n).clone();
    xl.requires_grad_();
    const Tensor yl = sbn->forward(xl);
    sum(mul(yl, G.narrow(0, off, n))).backward();
    e[0] = std::max(e[0], rel_err(yl, yr.narrow(0, off, n)));
    e[1] = std::max(e[1], rel_err(xl.grad(), xr.grad().narrow(0, off, n)));
    auto sp = sbn->parameters(), rp = ref->parameters();
    for (int j = 0; j < 2; ++j) {  // local weight/bias grads; their sum is the global one
      Tensor g = sp[size_t(j)].grad().clone();
      pg->allreduce(g)->wait();
      e[2 + j] = std::max(e[2 + j], rel_err(g, rp[size_t(j)].grad()));
    }
    if (n >= 2 && n < N && s == 0) {  // BatchNorm on the local slice alone is far off
      auto local = std::make_shared<nn::BatchNorm2d>(C);
      set_affine(*local, C);
      NoGradGuard no_grad;
      const Tensor x4 = xg.narrow(0, off, n).reshape({n, C, -1, 1});
      const double far = rel_err(local->forward(x4).reshape(yl.shape()), yr.narrow(0, off, n));
      ok = report(rank, far > 3 * k.tol && far > 1e-2,
                  "local BatchNorm differs: " + std::to_string(far)) &&
           ok;
    }
    ref->zero_grad();
    sbn->zero_grad();
  }
  auto sb = sbn->named_buffers(), rb = ref->named_buffers();
  for (size_t j = 0; j < 2; ++j) e[4 + j] = rel_err(sb[j].second, rb[j].second);
  ok = report(rank, sb[2].second.item<int64_t>() == 3 && rb[2].second.item<int64_t>() == 3,
              "num_batches_tracked") &&
       ok;
  ok = report(rank, same_on_all_ranks(*pg, flat(sbn->buffers())), "running stats bitwise") && ok;
  Tensor errs = testutil::from_f64({e[0], e[1], e[2], e[3], e[4], e[5]}, {6}, kFloat64);
  pg->allreduce(errs, ReduceOp::max)->wait();
  if (rank == 0)
    for (int j = 0; j < 6; ++j) shared_doubles()[k.slot + j] = errs.data_ptr<double>()[j];
  for (int j = 0; j < 6; ++j)
    ok =
        report(rank, errs.data_ptr<double>()[j] <= k.tol,
               "error " + std::to_string(j) + " = " + std::to_string(errs.data_ptr<double>()[j])) &&
        ok;
  return ok;
}

void check_case(const Case& k) {
  for (int j = 0; j < 6; ++j) shared_doubles()[k.slot + j] = -1;
  run_ranks(int(k.sizes.size()),
            [&k](int rank, std::shared_ptr<ProcessGroup> pg) { return run_case(k, rank, pg); });
  const double* e = shared_doubles() + k.slot;
  MESSAGE("max rel errors y ", e[0], " dx ", e[1], " dw ", e[2], " db ", e[3], " running_mean ",
          e[4], " running_var ", e[5]);
  for (int j = 0; j < 6; ++j) CHECK(e[j] >= 0);
}

}  // namespace

TEST_SUITE("sync_batchnorm") {
  TEST_CASE("sync_batchnorm: 2 ranks f64 BatchNorm2d, batches 3 and 5") {
    check_case({.sizes = {3, 5}, .tail = {2, 3}, .dtype = kFloat64, .tol = 1e-6});
  }

  TEST_CASE("sync_batchnorm: 3 ranks f64 BatchNorm2d, batches 3, 5, 2, and [N,C,D,H,W]") {
    check_case({.sizes = {3, 5, 2}, .tail = {2, 2}, .dtype = kFloat64, .tol = 1e-6});
    check_case({.sizes = {2, 1, 3}, .tail = {2, 3, 2}, .dtype = kFloat64, .tol = 1e-6});  // 5-D
  }

  TEST_CASE("sync_batchnorm: 3 ranks f64 BatchNorm1d [N,C,L] and [N,C], cumulative average") {
    check_case({.sizes = {4, 2, 3}, .tail = {5}, .bn1d = true, .momentum = std::nullopt});
    check_case({.sizes = {4, 2, 7}, .tail = {}, .bn1d = true, .momentum = 0.3});
  }

  TEST_CASE("sync_batchnorm: 3 ranks f32 BatchNorm2d") {
    check_case({.sizes = {3, 5, 2}, .tail = {4, 4}, .dtype = kFloat32, .tol = 1e-5});
  }

  TEST_CASE("sync_batchnorm: 2 ranks f32 BatchNorm1d [N,C]") {
    check_case({.sizes = {6, 3}, .tail = {}, .dtype = kFloat32, .bn1d = true, .tol = 1e-5});
  }

  TEST_CASE("sync_batchnorm: 3 ranks bf16 input, f32 parameters") {
    check_case({.sizes = {3, 5, 2}, .tail = {4, 4}, .dtype = kBFloat16, .tol = 1e-2});
  }

  TEST_CASE("sync_batchnorm: a rank with an empty batch contributes nothing") {
    check_case({.sizes = {0, 4}, .tail = {3}, .bn1d = true});
    check_case({.sizes = {3, 0, 2}, .tail = {2, 2}});
  }

  // Finite differences of the global loss sum_r <y_r, G_r>: every rank runs the same loop, the
  // perturbed element belongs to one rank at a time (weight/bias: every rank perturbs its replica).
  TEST_CASE("sync_batchnorm: gradcheck of the global loss on 2 ranks (f64)") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      const std::vector<int64_t> sizes{2, 3};
      const int64_t C = 2, L = 2, n = sizes[size_t(rank)];
      Tensor x = testutil::leaf({n, C, L}, 10 + uint64_t(rank), -1, 2);
      Tensor w = testutil::leaf({C}, 20), b = testutil::leaf({C}, 21);
      const Tensor G = random_tensor({n, C, L}, kFloat64, 30 + uint64_t(rank));
      auto global_loss = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        NoGradGuard no_grad;
        Tensor l = sum(mul(nn::functional::sync_batch_norm(xi, wi, bi, {}, {}, 0.1, 1e-5, pg), G))
                       .reshape({1})
                       .contiguous();
        pg->allreduce(l)->wait();
        return l.item<double>();
      };
      sum(mul(nn::functional::sync_batch_norm(x, w, b, {}, {}, 0.1, 1e-5, pg), G)).backward();
      Tensor gw = w.grad().clone(), gb = b.grad().clone();
      pg->allreduce(gw)->wait();
      pg->allreduce(gb)->wait();
      const double eps = 1e-6;
      double worst = 0;
      auto fd = [&](Tensor& t, int64_t i, bool mine) {  // central difference, in lockstep
        auto bump = [&](double d) {
          Tensor p = t.detach().clone();
          if (mine) p.data_ptr<double>()[i] += d;
          return p;
        };
        const bool is_x = &t == &x;
        const double lp =
            global_loss(is_x ? bump(eps) : x.detach(), &t == &w ? bump(eps) : w.detach(),
                        &t == &b ? bump(eps) : b.detach());
        const double lm =
            global_loss(is_x ? bump(-eps) : x.detach(), &t == &w ? bump(-eps) : w.detach(),
                        &t == &b ? bump(-eps) : b.detach());
        return (lp - lm) / (2 * eps);
      };
      for (int q = 0; q < 2; ++q)
        for (int64_t i = 0; i < sizes[size_t(q)] * C * L; ++i) {
          const double num = fd(x, i, q == rank);
          if (q == rank) worst = std::max(worst, std::abs(num - x.grad().data_ptr<double>()[i]));
        }
      for (int64_t c = 0; c < C; ++c) {
        worst = std::max(worst, std::abs(fd(w, c, true) - gw.data_ptr<double>()[c]));
        worst = std::max(worst, std::abs(fd(b, c, true) - gb.data_ptr<double>()[c]));
      }
      if (rank == 0) shared_doubles()[40] = worst;
      return report(rank, worst < 1e-6, "gradcheck error " + std::to_string(worst));
    });
    MESSAGE("gradcheck max abs error ", shared_doubles()[40]);
  }

  TEST_CASE("sync_batchnorm: gradcheck of the BatchNorm fallback (no group, f64)") {
    auto m =
        std::make_shared<nn::SyncBatchNorm>(3, nn::BatchNormOptions{.track_running_stats = false});
    auto f = [&m](const std::vector<Tensor>& in) {
      m->weight = in[1];
      m->bias = in[2];
      return m->forward(in[0]);
    };
    for (const Shape& shape : {Shape{4, 3}, Shape{3, 3, 2, 2}}) {
      const auto res = autograd::gradcheck(
          f, {testutil::leaf(shape, 1), testutil::leaf({3}, 2, 0.5, 1.5), testutil::leaf({3}, 3)});
      INFO(res.message);
      CHECK(res.ok);
    }
  }

  TEST_CASE("sync_batchnorm: ranks with different channel counts or dtypes are named") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      bool ok = true;
      nn::SyncBatchNorm bad(3 + rank, {}, pg);
      try {
        bad.forward(random_tensor({4, 3 + rank, 2}));
        ok = report(rank, false, "no error for different channel counts");
      } catch (const Error& e) {
        ok = report(rank, std::string(e.what()).find("rank 0: 3, rank 1: 4") != std::string::npos,
                    e.what()) &&
             ok;
      }
      nn::SyncBatchNorm m(3, {}, pg);
      try {
        m.forward(random_tensor({4, 3, 2}, rank == 0 ? kFloat32 : kFloat64));
        ok = report(rank, false, "no error for different dtypes");
      } catch (const Error& e) {
        const std::string msg = e.what();
        ok = report(rank,
                    msg.find("dtype") != std::string::npos && msg.find("rank") != std::string::npos,
                    msg) &&
             ok;
      }
      try {  // one sample in all: no variance (every rank fails the same way)
        m.forward(random_tensor({rank, 3}));
        ok = report(rank, false, "no error for a global batch of 1");
      } catch (const Error& e) {
        ok = report(rank, std::string(e.what()).find("more than 1 value") != std::string::npos,
                    e.what()) &&
             ok;
      }
      return ok;
    });
  }

  TEST_CASE("sync_batchnorm: bad inputs are refused with their shapes") {
    nn::SyncBatchNorm m(3);
    CHECK_THROWS_WITH_AS(m.forward(zeros({3})), doctest::Contains("got shape [3]"), Error);
    CHECK_THROWS_WITH_AS(m.forward(zeros({2, 4, 5})), doctest::Contains("expected 3 channels"),
                         Error);
    CHECK_THROWS_WITH_AS(nn::SyncBatchNorm(0), doctest::Contains("num_features"), Error);
  }

}  // TEST_SUITE

#endif  // MINIDL_WITH_GLOO
