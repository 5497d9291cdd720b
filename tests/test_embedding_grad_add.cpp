// embedding's backward adding its rows in place into a gradient the engine already gathered for
// the weight (a tied weight: gpt's wte is both the token embedding and the classifier): the
// same gradients as the dense sum plus an add, one dispatch fewer; the dense path where the
// gathered gradient is shared, absent, or under autograd::grad; MINIDL_UNFUSED=embedding_grad_add.
// And native::embedding_backward_add_ itself: values per dtype, padding_idx, errors.
#include <doctest/doctest.h>

#include "autograd/engine.h"
#include "minidl.h"
#include "tensor/variants.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// Token ids with repeats: [2, 5] over a vocabulary of v.
Tensor token_ids(int64_t v) {
  return from_f64({3, 1, 3, 0, double(v - 1), 1, 3, 7, 2, 3}, {2, 5}, kInt64);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

struct Grads {
  Tensor w_grad;
  int64_t backward_dispatches = 0;
};

// A tied weight w:[V, D]: logits = linear(embedding(w, ids), w), loss = sum(logits * r).
Grads tied_step(const Tensor& w0, const std::string& unfused) {
  ScopedUnfused u(unfused);
  Tensor w = w0.clone().requires_grad_();
  const Tensor ids = token_ids(w.size(0));
  const Tensor x = embedding(w, ids);  // [2, 5, D]
  const Tensor logits = linear(x, w);
  const Tensor loss = sum(logits * random_tensor(logits.shape(), w.dtype(), 9));
  Grads g;
  g.backward_dispatches = dispatches_of([&] { loss.backward(); });
  g.w_grad = w.grad();
  return g;
}

}  // namespace

TEST_CASE("embedding_grad_add: a tied weight's gradient without the dense sum and add") {
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    const Tensor w0 = random_tensor({11, 6}, dt, 4);
    const Grads fused = tied_step(w0, "");
    const Grads dense = tied_step(w0, "embedding_grad_add");
    CHECK(equal(fused.w_grad, dense.w_grad));
    CHECK(fused.backward_dispatches == dense.backward_dispatches - 1);  // no add
    // against the two contributions written out: dL/dw = r^T x + embedding_backward(r w)
    const Tensor ids = token_ids(11);
    const Tensor x = native::embedding(w0, ids).reshape({10, 6});
    const Tensor r = random_tensor({2, 5, 11}, dt, 9).reshape({10, 11});
    const Tensor expect =
        matmul(r.t(), x) + native::embedding_backward(matmul(r, w0).reshape({2, 5, 6}), ids, 11);
    CHECK(max_abs_diff(fused.w_grad, expect) <= (dt == kFloat64 ? 1e-12 : 1e-5));
  }
}

TEST_CASE("embedding_grad_add: the dense path where the gathered gradient is shared or absent") {
  Tensor w = random_tensor({11, 6}, kFloat32, 5).requires_grad_();
  const Tensor ids = token_ids(11);
  // the first gradient w gathers is a view of the caller's tensor: it must stay untouched
  // (the view is made last, so its backward runs first and its gradient is gathered first)
  const Tensor out_emb = embedding(w, ids);
  const Tensor out_view = w.view({66});
  const Tensor g_view = random_tensor({66}, kFloat32, 6);
  const Tensor g_emb = random_tensor({2, 5, 6}, kFloat32, 7);
  const Tensor g_view_before = g_view.clone();
  autograd::run_backward({out_emb, out_view}, {g_emb, g_view}, false);
  CHECK(bitwise_equal(g_view, g_view_before));
  CHECK(equal(w.grad(), g_view.view({11, 6}) + native::embedding_backward(g_emb, ids, 11)));
  // an embedding alone: nothing gathered before it, the dense gradient
  Tensor w2 = random_tensor({11, 6}, kFloat32, 8).requires_grad_();
  embedding(w2, ids).backward(g_emb);
  CHECK(bitwise_equal(w2.grad(), native::embedding_backward(g_emb, ids, 11)));
  // autograd::grad: no in-place additions (its gradients are captured, not gathered)
  Tensor w3 = random_tensor({11, 6}, kFloat32, 9).requires_grad_();
  const Tensor loss = sum(linear(embedding(w3, ids), w3));
  const Tensor via_grad = autograd::grad({loss}, {w3})[0];
  ScopedUnfused u("embedding_grad_add");
  Tensor w4 = w3.detach().clone().requires_grad_();
  sum(linear(embedding(w4, ids), w4)).backward();
  CHECK(equal(via_grad, w4.grad()));
}

TEST_CASE("embedding_backward_add_: the indexed rows plus their sums, the rest untouched") {
  const Tensor ids = token_ids(11);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dt);
    const Tensor g = random_tensor({2, 5, 6}, dt, 10);
    for (int64_t padding_idx : {int64_t(-1), int64_t(3)}) {
      CAPTURE(padding_idx);
      Tensor acc = random_tensor({11, 6}, dt, 11);
      const Tensor before = acc.clone();
      native::embedding_backward_add_(acc, g, ids, padding_idx);
      // bitwise the out-of-place sum plus an add (rows not indexed: x + 0 = x for x != -0)
      CHECK(bitwise_equal(acc, before + native::embedding_backward(g, ids, 11, padding_idx)));
      CHECK(bitwise_equal(acc.select(0, 4), before.select(0, 4)));  // row 4: never indexed
      if (padding_idx == 3) CHECK(bitwise_equal(acc.select(0, 3), before.select(0, 3)));
    }
  }
  Tensor acc = zeros({11, 6});
  CHECK_THROWS_WITH_AS(native::embedding_backward_add_(acc, zeros({2, 5, 7}), ids),
                       doctest::Contains("does not take rows of grad_out [2, 5, 7]"), Error);
  CHECK_THROWS_WITH_AS(native::embedding_backward_add_(acc, zeros({2, 5, 6}, kFloat64), ids),
                       doctest::Contains("does not take rows"), Error);
  Tensor flat = zeros({66});
  CHECK_THROWS_WITH_AS(native::embedding_backward_add_(flat, zeros({2, 5, 6}), ids),
                       doctest::Contains("grad_weight must be [num_weights, D], got [66]"), Error);
  CHECK_THROWS_WITH_AS(native::embedding_backward_add_(acc, zeros({2, 5, 6}), ids + 4),
                       doctest::Contains("index 14 is out of bounds for dimension 0 with size 11"),
                       Error);
}

TEST_SUITE("cuda_embedding") {
  TEST_CASE("cuda_embedding: embedding_backward_add_ equals the CPU's bitwise, tied weights too") {
    const Tensor ids = token_ids(11);
    for (DType dt : {kFloat32, kBFloat16}) {
      CAPTURE(dt);
      const Tensor g = random_tensor({2, 5, 6}, dt, 12);
      Tensor host = random_tensor({11, 6}, dt, 13);
      Tensor dev = host.to(kCUDA);
      native::embedding_backward_add_(host, g, ids, 3);
      native::embedding_backward_add_(dev, g.to(kCUDA), ids.to(kCUDA), 3);
      CHECK(bitwise_equal(dev.cpu(), host));
    }
    // the tied step on the device takes the in-place path and matches the dense one
    Tensor w = random_tensor({11, 6}, kFloat32, 14).to(kCUDA).requires_grad_();
    sum(linear(embedding(w, ids.to(kCUDA)), w)).backward();
    ScopedUnfused u("embedding_grad_add");
    Tensor w2 = w.detach().clone().requires_grad_();
    sum(linear(embedding(w2, ids.to(kCUDA)), w2)).backward();
    CHECK(equal(w.grad().cpu(), w2.grad().cpu()));
  }
}
