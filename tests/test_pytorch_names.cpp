// The names a PyTorch user reaches for exist and are the same functions: F:: for
// nn::functional, every loss unqualified like cross_entropy, nn::utils::clip_grad_norm_,
// GroupNormOptions, printing x.sizes(), and dist::all_reduce/broadcast/all_gather/
// reduce_scatter on a group.
#include <doctest/doctest.h>

#include <sstream>

#include "ddp_test_util.h"
#include "minidl.h"
#include "test_util.h"

using namespace minidl;
using testutil::bitwise_equal;

TEST_CASE("F is nn::functional, and every loss is callable like cross_entropy") {
  Tensor x = testutil::random_tensor({3, 4}, kFloat32, 1);
  Tensor y = testutil::random_tensor({3, 4}, kFloat32, 2);
  Tensor labels = tensor(std::vector<int64_t>{0, 3, 1});
  CHECK(bitwise_equal(F::mse_loss(x, y), nn::functional::mse_loss(x, y)));
  CHECK(bitwise_equal(mse_loss(x, y), F::mse_loss(x, y)));
  CHECK(bitwise_equal(l1_loss(x, y), F::l1_loss(x, y)));
  CHECK(bitwise_equal(smooth_l1_loss(x, y), F::smooth_l1_loss(x, y)));
  CHECK(bitwise_equal(huber_loss(x, y), F::huber_loss(x, y)));
  CHECK(bitwise_equal(nll_loss(log_softmax(x, 1), labels), F::nll_loss(log_softmax(x, 1), labels)));
  CHECK(bitwise_equal(cross_entropy(x, labels), F::cross_entropy(x, labels)));
  Tensor p = sigmoid(x), t = sigmoid(y);
  CHECK(bitwise_equal(binary_cross_entropy(p, t), F::binary_cross_entropy(p, t)));
  CHECK(bitwise_equal(binary_cross_entropy_with_logits(x, t),
                      F::binary_cross_entropy_with_logits(x, t)));
  CHECK(F::interpolate(ones({1, 1, 2, 2}), {.size = {4, 4}}).size(-1) == 4);
}

TEST_CASE("nn::utils::clip_grad_norm_ is optim::clip_grad_norm_") {
  Tensor a = full({3}, 2.0).requires_grad_(), b = full({3}, 2.0).requires_grad_();
  sum(a * a).backward();
  sum(b * b).backward();
  const double na = nn::utils::clip_grad_norm_({a}, 1.0).item<double>();
  const double nb = optim::clip_grad_norm_({b}, 1.0).item<double>();
  CHECK(na == nb);
  CHECK(bitwise_equal(a.grad(), b.grad()));
  nn::utils::clip_grad_value_({a}, 0.1);
  CHECK(max(a.grad()).item<double>() == doctest::Approx(0.1));  // clipped to 0.1f
}

TEST_CASE("GroupNormOptions like LayerNormOptions and BatchNormOptions") {
  nn::GroupNorm named(2, 6, {.eps = 1e-3, .affine = false});
  CHECK(named.eps == 1e-3);
  CHECK_FALSE(named.affine);
  CHECK(named.parameters().empty());
  nn::GroupNorm positional(2, 6, 1e-3, false);
  Tensor x = testutil::random_tensor({2, 6, 3}, kFloat32, 3);
  CHECK(bitwise_equal(named(x), positional(x)));
  CHECK(nn::GroupNorm(3, 6, {.eps = 1e-6}).extra_repr() == "3, 6, eps=1e-06, affine=True");
}

TEST_CASE("x.sizes() prints like shape_str (torch's print(x.shape))") {
  Tensor x = zeros({2, 3, 4});
  std::ostringstream os;
  os << x.sizes() << " " << Shape{} << " " << x.strides();
  CHECK(os.str() == "[2, 3, 4] [] [12, 4, 1]");
  CHECK(x.shape_str() == "[2, 3, 4]");
}

TEST_CASE("dist:: collectives as free functions (torch.distributed's names)") {
  CHECK_FALSE(dist::is_initialized());
  Tensor t = ones({2});
  CHECK_THROWS_WITH_AS(dist::all_reduce(t),
                       doctest::Contains("dist::all_reduce: Default process group has not been "
                                         "initialized"),
                       Error);
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
    using ddptest::report;
    Tensor v = full({3}, double(rank + 1));
    dist::all_reduce(v, dist::ReduceOp::sum, pg.get());
    bool ok = report(rank, sum(v).item<double>() == 9.0, "all_reduce sum");
    Tensor b = full({2}, double(rank * 10));
    auto work = dist::broadcast(b, 1, pg.get(), /*async_op=*/true);
    work->wait();
    ok = report(rank, sum(b).item<double>() == 20.0, "broadcast from rank 1") && ok;
    std::vector<Tensor> all;
    dist::all_gather(all, full({2}, double(rank)), pg.get());
    ok = report(rank, all.size() == 2 && sum(all[1]).item<double>() == 2.0, "all_gather") && ok;
    Tensor out = empty({2});
    dist::reduce_scatter(out, {full({2}, 1.0), full({2}, 2.0)}, dist::ReduceOp::sum, pg.get());
    ok = report(rank, sum(out).item<double>() == 4.0 * (rank + 1), "reduce_scatter") && ok;
    try {
      dist::broadcast(b, 2, pg.get());
      ok = report(rank, false, "broadcast from rank 2 of 2 should throw");
    } catch (const Error& e) {
      ok = report(rank, std::string(e.what()).find("src 2") != std::string::npos, e.what()) && ok;
    }
    return ok;
  });
}
