// Autograd through views, copies, joins and indexing: gradcheck (f64) for every wired op,
// chains of views on non-contiguous tensors, views used twice, no history under NoGradGuard,
// and the in-place errors of copy_/fill_/scatter_add_.
#include <doctest/doctest.h>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;
using autograd::gradcheck;

namespace {
// A nonlinear scalar-free wrapper so gradients are not all ones: y * y.
Tensor sq(const Tensor& y) {
  return mul(y, y);
}
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
void check_grad(const Fn& f, const std::vector<Tensor>& inputs) {
  auto r = gradcheck(f, inputs);
  CHECK_MESSAGE(r.ok, r.message);
}
}  // namespace

TEST_CASE("views: gradcheck of each view member") {
  Tensor x = leaf({3, 4}, 1), x3 = leaf({2, 3, 4}, 2), v = leaf({4}, 3);
  check_grad([](const auto& in) { return sq(in[0].view({4, 3})); }, {x});
  check_grad([](const auto& in) { return sq(in[0].view({-1})); }, {x});
  check_grad([](const auto& in) { return sq(in[0].reshape({2, 6})); }, {x});
  check_grad([](const auto& in) { return sq(in[0].permute({2, 0, 1})); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].transpose(0, 2)); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].t()); }, {x});
  check_grad([](const auto& in) { return sq(in[0].narrow(1, 1, 2)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].narrow(0, -2, 2)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].slice(1, 0, 4, 2)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].slice(2, 1, 4, 3)); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].select(1, -1)); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].expand({2, 3, 4})); }, {v});
  check_grad([](const auto& in) { return sq(in[0].unsqueeze(0).expand({3, 4})); }, {v});
  check_grad([](const auto& in) { return sq(in[0].unsqueeze(1)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].unsqueeze(1).squeeze()); }, {x});
  check_grad([](const auto& in) { return sq(in[0].unsqueeze(2).squeeze(2)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].flatten()); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].flatten(1, 2)); }, {x3});
  check_grad([](const auto& in) { return sq(in[0].unflatten(1, {2, 2})); }, {x});
  check_grad([](const auto& in) { return sq(in[0].contiguous()); }, {x});
  check_grad([](const auto& in) { return sq(in[0].clone()); }, {x});
}

TEST_CASE("views: chains on non-contiguous inputs and a view used twice") {
  Tensor x = leaf({4, 6}, 4), x3 = leaf({2, 3, 4}, 5);
  // transposed -> reshape must copy (CloneBackward + ViewBackward) -> slice with step
  check_grad([](const auto& in) { return sq(in[0].t().reshape({-1}).slice(0, 1, 24, 3)); }, {x});
  check_grad([](const auto& in) { return sq(in[0].t().contiguous().view({2, 12})); }, {x});
  check_grad(
      [](const auto& in) {
        return sq(in[0].permute({1, 2, 0}).select(0, 1).narrow(0, 1, 2).flatten());
      },
      {x3});
  check_grad([](const auto& in) { return sq(in[0].slice(1, 0, 6, 2).t().unsqueeze(0)); }, {x});
  // the same view used twice, and overlapping views of one input
  check_grad(
      [](const auto& in) {
        Tensor a = in[0].narrow(1, 0, 3);
        return mul(a, a.t().t());
      },
      {x});
  check_grad([](const auto& in) { return mul(in[0].narrow(1, 0, 4), in[0].narrow(1, 2, 4)); }, {x});
  // hand-checked: d/dx sum(x.select(0,1)) + 2*sum(x.select(0,1)) = 3 at row 1
  Tensor y = leaf({3, 2}, 6);
  Tensor r = y.select(0, 1);
  sum(add(r, mul(r, 2.0))).backward();
  check_close(y.grad(), std::vector<double>{0, 0, 3, 3, 0, 0});
  // expand of a non-contiguous leaf view
  Tensor z = leaf({3, 1}, 7);
  sum(z.t().expand({4, 3})).backward();
  check_close(z.grad(), std::vector<double>{4, 4, 4});
}

TEST_CASE("views: history bookkeeping") {
  Tensor x = leaf({2, 3}, 8);
  CHECK(x.view({6}).grad_fn()->name() == "ViewBackward");
  CHECK(x.t().grad_fn()->name() == "TransposeBackward");
  CHECK(x.t().reshape({6}).grad_fn()->name() == "ViewBackward");  // via CloneBackward
  CHECK(x.t().reshape({6}).grad_fn()->next_edges[0].fn->name() == "CloneBackward");
  // identity results keep the input itself
  CHECK(x.contiguous().is_same(x));
  CHECK(x.to(kFloat64).is_same(x));
  CHECK(x.squeeze(0).is_same(x));
  Tensor y = mul(x, 2.0);
  CHECK(y.contiguous().grad_fn() == y.grad_fn());
  // integer casts get no history
  CHECK(x.to(kInt64).grad_fn() == nullptr);
  CHECK(!x.to(kInt64).requires_grad());
  {
    NoGradGuard guard;
    CHECK(x.view({6}).grad_fn() == nullptr);
    CHECK(x.t().clone().grad_fn() == nullptr);
    CHECK(!x.narrow(0, 0, 1).requires_grad());
    CHECK(!cat({x, x}, 0).requires_grad());
    CHECK(!gather(x, 1, zeros({2, 1}, kInt64)).requires_grad());
    for (const Tensor& p : x.split(1, 0)) CHECK(p.grad_fn() == nullptr);
  }
  Tensor plain = random_tensor({2, 3}, kFloat64, 9);
  CHECK(!plain.view({6}).requires_grad());
  // element access does not build graphs
  CHECK(x.at({1, 2}) == doctest::Approx(to_f64(x)[5]));
}

TEST_CASE("copies: to(dtype), to(device), clone") {
  Tensor x = leaf({3, 2}, 10);
  check_grad([](const auto& in) { return sq(in[0].to(kCPU)); }, {x});
  Tensor y = x.to(kFloat32);
  CHECK(y.grad_fn()->name() == "ToCopyBackward");
  sum(mul(y, 3.0)).backward();
  CHECK(x.grad().dtype() == kFloat64);
  check_close(x.grad(), std::vector<double>(6, 3.0));
}

TEST_CASE("split and chunk: one view node per piece") {
  Tensor x = leaf({5, 3}, 11);
  check_grad(
      [](const auto& in) {
        auto p = in[0].split(2, 0);  // [2,3], [2,3], [1,3]
        return cat({mul(p[0], p[1]), sq(p[2])}, 0);
      },
      {x});
  check_grad(
      [](const auto& in) {
        auto p = split(in[0].t(), std::vector<int64_t>{1, 4}, 1);
        return mul(p[0], p[1]);  // broadcast [3,1] * [3,4]
      },
      {x});
  check_grad(
      [](const auto& in) {
        auto p = in[0].chunk(3, 1);
        return add(sq(p[0]), p[2]);
      },
      {x});
  // only some pieces used: the rest get zeros
  Tensor z = leaf({6}, 12);
  auto p = z.chunk(3, 0);
  sum(mul(p[1], 5.0)).backward();
  check_close(z.grad(), std::vector<double>{0, 0, 5, 5, 0, 0});
}

TEST_CASE("cat and stack") {
  Tensor a = leaf({2, 3}, 13), b = leaf({1, 3}, 14), c = leaf({2, 2}, 15);
  check_grad([](const auto& in) { return sq(cat({in[0], in[1]}, 0)); }, {a, b});
  check_grad([](const auto& in) { return sq(cat({in[0], in[1].t()}, 1)); }, {a, c});
  check_grad([](const auto& in) { return sq(cat({in[0], in[0].slice(1, 0, 3, 2)}, -1)); }, {a});
  check_grad([](const auto& in) { return sq(stack({in[0], in[1]}, 1)); }, {a, leaf({2, 3}, 16)});
  check_grad([](const auto& in) { return sq(stack({in[0], in[0].t().t()}, 0)); }, {a});
  // inputs that do not require grad and a legacy empty [0] tensor in the list
  Tensor d = random_tensor({2, 3}, kFloat64, 17);
  Tensor e = leaf({0}, 18);
  Tensor out = cat({d, a, e}, 0);
  CHECK(out.grad_fn()->name() == "CatBackward");
  sum(mul(out, out)).backward();
  std::vector<double> expect;
  for (double v : to_f64(a)) expect.push_back(2 * v);
  check_close(a.grad(), expect);
  CHECK(e.grad().shape() == Shape{0});
  // mixed dtypes: the grad comes back in each input's dtype
  Tensor f = random_tensor({1, 3}, kFloat32, 19);
  f.requires_grad_();
  Tensor g = leaf({1, 3}, 20);
  sum(cat({f, g}, 0)).backward();
  CHECK(f.grad().dtype() == kFloat32);
  check_close(f.grad(), std::vector<double>(3, 1.0));
  check_close(g.grad(), std::vector<double>(3, 1.0));
}

TEST_CASE("embedding, index_select, gather, scatter_add") {
  Tensor w = leaf({5, 3}, 21);
  Tensor idx = tensor(std::vector<int64_t>{4, 0, 4, 2, 1, 4}, Shape{2, 3});
  check_grad([idx](const auto& in) { return sq(embedding(in[0], idx)); }, {w});
  // hand-checked: row 4 used three times
  Tensor w2 = leaf({5, 2}, 22);
  sum(embedding(w2, idx)).backward();
  check_close(w2.grad(), std::vector<double>{1, 1, 1, 1, 1, 1, 0, 0, 3, 3});

  Tensor x = leaf({4, 3}, 23), x3 = leaf({2, 3, 4}, 24);
  Tensor i1 = tensor(std::vector<int64_t>{2, 0, 2});
  check_grad([i1](const auto& in) { return sq(index_select(in[0], 0, i1)); }, {x});
  check_grad([i1](const auto& in) { return sq(index_select(in[0], 1, i1)); }, {x});
  check_grad([i1](const auto& in) { return sq(index_select(in[0], 2, i1)); }, {x3});
  check_grad([i1](const auto& in) { return sq(index_select(in[0].t(), 0, i1)); }, {x});
  check_grad([i1](const auto& in) { return sq(index_select(in[0], 0, i1.to(kInt32))); }, {x});
  Tensor s0 = leaf({}, 25);
  check_grad([](const auto& in) { return sq(index_select(in[0], 0, zeros({1}, kInt64))); }, {s0});

  Tensor gi = tensor(std::vector<int64_t>{0, 2, 2, 1, 0, 0}, Shape{3, 2});
  check_grad([gi](const auto& in) { return sq(gather(in[0], 0, gi)); }, {leaf({3, 3}, 26)});
  check_grad([gi](const auto& in) { return sq(gather(in[0], 1, gi)); }, {x});
  check_grad([gi](const auto& in) { return sq(gather(in[0].t(), 1, gi)); }, {x});
  Tensor xg = leaf({3}, 27);
  sum(gather(xg, 0, tensor(std::vector<int64_t>{1, 1, 2, 1}))).backward();
  check_close(xg.grad(), std::vector<double>{0, 3, 1});

  Tensor si = tensor(std::vector<int64_t>{0, 2, 1, 1}, Shape{2, 2});
  check_grad([si](const auto& in) { return sq(scatter_add(in[0], 0, si, in[1])); },
             {leaf({3, 2}, 28), leaf({2, 2}, 29)});
  check_grad([si](const auto& in) { return sq(scatter_add(in[0], 1, si, in[1])); },
             {leaf({2, 3}, 30), leaf({3, 3}, 31)});  // src larger than index
  // indices never get gradients; integer outputs no history
  CHECK(!one_hot(tensor(std::vector<int64_t>{0, 2})).requires_grad());
  CHECK(!topk(x, 1, 1).second.requires_grad());
}

TEST_CASE("in-place: copy_, fill_, scatter_add_ refuse autograd tensors in grad mode") {
  Tensor x = leaf({3}, 32);
  Tensor plain = random_tensor({3}, kFloat64, 33);
  CHECK_THROWS_WITH_AS(x.copy_(plain),
                       doctest::Contains("a leaf tensor that requires grad is being used in an "
                                         "in-place operation"),
                       Error);
  CHECK_THROWS_WITH_AS(x.fill_(1.0), doctest::Contains("`fill_`: a leaf tensor"), Error);
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH_AS(y.copy_(plain), doctest::Contains("autograd history are not supported"),
                       Error);
  CHECK_THROWS_WITH_AS(x.narrow(0, 0, 1).fill_(0.0),
                       doctest::Contains("autograd history are not supported"), Error);
  CHECK_THROWS_WITH_AS(plain.copy_(x), doctest::Contains("the gradient would be dropped"), Error);
  Tensor idx = zeros({3}, kInt64);
  CHECK_THROWS_WITH_AS(scatter_add_(x, 0, idx, plain), doctest::Contains("scatter_add_"), Error);
  CHECK_THROWS_WITH_AS(scatter_add_(plain, 0, idx, x),
                       doctest::Contains("operand that requires grad"), Error);
  {
    NoGradGuard guard;  // optimizers and load_state_dict write into parameters this way
    x.copy_(plain);
    check_close(x, to_f64(plain));
    x.fill_(2.0);
    scatter_add_(x, 0, idx, plain);
    plain.copy_(x);
  }
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
}
