// add_layer_norm (a residual add and the next LayerNorm in one node, issue 40): f64 gradcheck
// through both outputs; bitwise the values and gradients of x + y, layer_norm and a cast for
// every dtype mix the kernel takes; the composite for other mixes; errors. nn::residual_layer_norm
// and the TransformerBlock: bitwise equal to MINIDL_UNFUSED=residual_layer_norm in f32 and under
// bf16 autocast, with fewer dispatches; a hooked LayerNorm takes its call.
#include <doctest/doctest.h>

#include "autograd/autocast.h"
#include "apps/gpt/model.h"
#include "autograd/engine.h"
#include "nn/normalization.h"
#include "nn/transformer.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Mix {
  DType x, y, out;
};

// sum, out and the gradients of x, y, w, b for upstream gradients gs (sum) and go (out).
struct Run {
  std::vector<Tensor> values;
};

Run run(bool fused, const Mix& m, const Shape& shape, bool with_y, bool grad_sum, bool grad_out) {
  const int64_t D = shape.back();
  Tensor x = random_tensor(shape, m.x, 1).requires_grad_();
  Tensor y = with_y ? random_tensor(shape, m.y, 2).requires_grad_() : Tensor();
  Tensor w = random_tensor({D}, kFloat32, 3, 0.5, 1.5).requires_grad_();
  Tensor b = random_tensor({D}, kFloat32, 4).requires_grad_();
  Tensor sum, out;
  if (fused) {
    AddLayerNormResult r = add_layer_norm(x, y, {D}, w, b, 1e-5, m.out);
    sum = r.sum, out = r.out;
  } else {
    sum = with_y ? x + y : x;
    out = layer_norm(sum, {D}, w, b, 1e-5).out.to(m.out);
  }
  std::vector<Tensor> roots, grads;
  if (grad_sum && with_y) roots.push_back(sum), grads.push_back(random_tensor(shape, m.x, 5));
  if (grad_out) roots.push_back(out), grads.push_back(random_tensor(shape, m.out, 6));
  // only sum's gradient: w and b take no part
  std::vector<Tensor> inputs = grad_out ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x};
  if (with_y) inputs.push_back(y);
  std::vector<Tensor> g = autograd::grad(roots, inputs, grads, false);
  Run r;
  r.values = {sum.detach(), out.detach()};
  for (const Tensor& t : g) r.values.push_back(t);
  return r;
}

}  // namespace

TEST_CASE("add_layer_norm: gradcheck in f64 through sum and out, with and without y") {
  const Tensor x = leaf({3, 5}, 11), y = leaf({3, 5}, 12), w = leaf({5}, 13), b = leaf({5}, 14);
  const Tensor c = random_tensor({3, 5}, kFloat64, 15);
  // both outputs used (sum's own gradient added to the normalisation's)
  GRADCHECK(
      [&](const std::vector<Tensor>& t) {
        AddLayerNormResult r = add_layer_norm(t[0], t[1], {5}, t[2], t[3]);
        return r.sum * c + r.out;
      },
      {x, y, w, b});
  // only out, only sum, no y, no affine parameters, two normalised dims
  GRADCHECK([](const std::vector<Tensor>& t) { return add_layer_norm(t[0], t[1], {5}).out; },
            {x, y});
  GRADCHECK([](const std::vector<Tensor>& t) { return add_layer_norm(t[0], t[1], {5}).sum; },
            {x, y});
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return add_layer_norm(t[0], Tensor(), {5}, t[1], t[2]).out;
      },
      {x, w, b});
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return add_layer_norm(t[0], t[1], {3, 5}).out;
      },
      {x, y});
}

TEST_CASE("add_layer_norm: bitwise x + y, layer_norm and the cast, values and gradients") {
  const std::vector<Mix> mixes = {
      {kFloat32, kFloat32, kFloat32},    {kFloat32, kBFloat16, kBFloat16},
      {kFloat32, kFloat16, kFloat32},    {kFloat32, kFloat32, kFloat16},
      {kBFloat16, kBFloat16, kBFloat16}, {kFloat16, kFloat16, kFloat16},
      {kFloat64, kFloat64, kFloat64}};
  // rows shorter and longer than a CPU row chunk, one normalised dim of 768 (GPT-2's)
  for (const Shape& shape : {Shape{4, 7}, Shape{2, 3, 768}, Shape{300, 24}})
    for (const Mix& m : mixes)
      for (int mode = 0; mode < 4; ++mode) {
        const bool with_y = mode != 3, gsum = mode != 1, gout = mode != 2;
        const std::string what = std::string(dtype_name(m.x)) + " + " +
                                 std::string(dtype_name(m.y)) + " -> " +
                                 std::string(dtype_name(m.out)) + ", mode " + std::to_string(mode) +
                                 ", " + shape_str(shape);
        CAPTURE(what);
        const Run f = run(true, m, shape, with_y, gsum, gout);
        const Run u = run(false, m, shape, with_y, gsum, gout);
        REQUIRE(f.values.size() == u.values.size());
        CHECK(f.values[1].dtype() == m.out);
        for (size_t i = 0; i < f.values.size(); ++i) {
          CAPTURE(i);
          CHECK(f.values[i].defined() == u.values[i].defined());
          if (f.values[i].defined()) CHECK(bitwise_equal(f.values[i], u.values[i]));
        }
      }
}

TEST_CASE("add_layer_norm: other dtype mixes run as the composite, one node otherwise") {
  const Tensor x = random_tensor({3, 4}, kFloat32, 1), y = random_tensor({3, 4}, kFloat64, 2);
  AddLayerNormResult r = add_layer_norm(x, y, {4});  // f64 sum: the composite
  CHECK(r.sum.dtype() == kFloat64);
  CHECK(bitwise_equal(r.sum, x + y));
  CHECK(bitwise_equal(r.out, layer_norm(x + y, {4}).out));
  // the fused path is one dispatch forward; the composite (add, layer_norm, cast) three
  const Tensor yb = random_tensor({3, 4}, kBFloat16, 3);
  CHECK(dispatches_of([&] { add_layer_norm(x, yb, {4}, {}, {}, 1e-5, kBFloat16); }) == 1);
  CHECK(dispatches_of([&] { layer_norm(x + yb, {4}).out.to(kBFloat16); }) >= 3);
  // without y, sum is x itself
  CHECK(add_layer_norm(x, Tensor(), {4}).sum.is_same(x));
}

TEST_CASE("add_layer_norm: errors name the shapes and dtypes") {
  const Tensor x = random_tensor({3, 4}, kFloat32, 1);
  CHECK_THROWS_WITH_AS(
      add_layer_norm(x, random_tensor({4}, kFloat32, 2), {4}),
      doctest::Contains("the residual [4] and the input [3, 4] must have one shape"), Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, Tensor(), {5}),
                       doctest::Contains("expected input with shape [*, 5]"), Error);
  CHECK_THROWS_WITH_AS(
      native::add_layer_norm(x, random_tensor({3, 4}, kFloat64, 2), {4}, {}, {}, 1e-5, kFloat32),
      doctest::Contains("the residual's dtype must be float32, float16 or bfloat16"), Error);
  CHECK_THROWS_WITH_AS(
      native::add_layer_norm(random_tensor({3, 4}, kFloat64, 1), Tensor(), {4}, {}, {}, 1e-5,
                             kBFloat16),
      doctest::Contains("out_dtype must be float64 (the input's dtype), got bfloat16"), Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(random_tensor({3, 4}, kInt64, 1), Tensor(), {4}),
                       doctest::Contains("expected a floating input"), Error);
  CHECK_THROWS_WITH_AS(native::add_layer_norm_backward(Tensor(), Tensor(), x, {4}, Tensor(),
                                                       Tensor(), Tensor(), std::nullopt, false),
                       doctest::Contains("needs grad_out, grad_sum or both"), Error);
}

TEST_CASE("residual_layer_norm: out in the autocast dtype only where asked and under autocast") {
  nn::LayerNorm ln(8);
  const Tensor x = random_tensor({2, 8}, kFloat32, 1), y = random_tensor({2, 8}, kBFloat16, 2);
  CHECK(nn::residual_layer_norm(x, y, ln, true).out.dtype() == kFloat32);
  amp::autocast ac(DeviceType::cpu);
  const nn::ResidualNorm a = nn::residual_layer_norm(x, y, ln, true);
  CHECK(a.out.dtype() == kBFloat16);
  CHECK(a.sum.dtype() == kFloat32);
  CHECK(nn::residual_layer_norm(x, y, ln).out.dtype() == kFloat32);
  // a 16-bit sum under autocast: the module's call (its own dtype rules)
  const Tensor xb = random_tensor({2, 8}, kBFloat16, 3);
  CHECK(bitwise_equal(nn::residual_layer_norm(xb, y, ln, true).out, ln(xb + y)));
}

TEST_CASE("residual_layer_norm: a LayerNorm with a forward hook is called as a module") {
  nn::LayerNorm ln(8);
  int calls = 0;
  ln.register_forward_hook([&](nn::Module&, const std::vector<Tensor>&, const Tensor&) {
    ++calls;
    return std::optional<Tensor>();
  });
  const Tensor x = random_tensor({2, 8}, kFloat32, 1), y = random_tensor({2, 8}, kFloat32, 2);
  const nn::ResidualNorm r = nn::residual_layer_norm(x, y, ln, true);
  CHECK(calls == 1);
  CHECK(bitwise_equal(r.out, layer_norm(x + y, {8}, ln.weight, ln.bias).out));
}

namespace {

// A TransformerBlock step: output and every parameter's and the input's gradient, and the
// dispatches of forward + backward; bf16: under CPU bf16 autocast.
struct BlockStep {
  std::vector<Tensor> values;
  int64_t dispatches = 0;
};

BlockStep block_step(nn::TransformerBlock& block, bool bf16) {
  BlockStep s;
  block.zero_grad();
  Tensor x = random_tensor({2, 6, 32}, kFloat32, 21).requires_grad_();
  const Tensor c = random_tensor({2, 6, 32}, kFloat32, 22);
  s.dispatches = dispatches_of([&] {
    Tensor out;
    {
      amp::autocast ac(DeviceType::cpu, kBFloat16, bf16);
      out = block(x);
    }
    sum(out.to(kFloat32) * c).backward();
    s.values.push_back(out.detach());
  });
  s.values.push_back(x.grad());
  for (const Tensor& p : block.parameters()) s.values.push_back(p.grad());
  return s;
}

}  // namespace

TEST_CASE("TransformerBlock: the fused residual norms are bitwise the unfused block") {
  manual_seed(5);
  nn::TransformerBlock block(32, 4);
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    amp::clear_autocast_cache();
    const BlockStep f = block_step(block, bf16);
    BlockStep u;
    {
      ScopedUnfused off("residual_layer_norm");
      amp::clear_autocast_cache();
      u = block_step(block, bf16);
    }
    REQUIRE(f.values.size() == u.values.size());
    for (size_t i = 0; i < f.values.size(); ++i) {
      CAPTURE(i);
      CHECK(bitwise_equal(f.values[i], u.values[i]));
    }
    // f32: the add and ln_2 forward, ln_2's backward and the gradient sum backward become one
    // each (-2); bf16: also the four casts of ln_1 and ln_2's rows, the residual's cast forward
    // and its gradient's cast backward (-8)
    CHECK(f.dispatches == u.dispatches - (bf16 ? 8 : 2));
  }
}

namespace {

// gpt's model: loss, every parameter's gradient and the dispatches of forward + backward.
BlockStep gpt_step(gpt::GPT& model, bool bf16) {
  BlockStep s;
  model.zero_grad();
  const Tensor idx = randint(0, 32, {2, 8}, kInt64), targets = randint(0, 32, {2, 8}, kInt64);
  s.dispatches = dispatches_of([&] {
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cpu, kBFloat16, bf16);
      loss = model.forward(idx, targets);
    }
    loss.backward();
    s.values.push_back(loss.detach());
  });
  for (const Tensor& p : model.parameters()) s.values.push_back(p.grad());
  return s;
}

// A 2-layer GPT of width 24 over 32 tokens.
gpt::GPTConfig small_gpt_config() {
  gpt::GPTConfig c;
  c.block_size = 16, c.vocab_size = 32, c.padded_vocab_size = 32;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 24;
  return c;
}

}  // namespace

TEST_CASE("gpt: each block's last residual add and the next LayerNorm fused, bitwise unfused") {
  const gpt::GPTConfig c = small_gpt_config();
  manual_seed(9);
  gpt::GPT model(c);
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    const auto step = [&](const std::string& unfused, bool hook) {
      ScopedUnfused off(unfused);
      amp::clear_autocast_cache();
      nn::Module::RemovableHandle handle;
      if (hook)  // a hooked block (FSDP's gathering): every block through its own call
        handle = (*model.h)[1]->register_forward_hook(
            [](nn::Module&, const std::vector<Tensor>&, const Tensor&) {
              return std::optional<Tensor>();
            });
      manual_seed(3);
      BlockStep s = gpt_step(model, bf16);
      handle.remove();
      return s;
    };
    const BlockStep across = step("", false), per_block = step("", true);
    const BlockStep unfused = step("residual_layer_norm", false);
    REQUIRE(across.values.size() == unfused.values.size());
    for (size_t i = 0; i < across.values.size(); ++i) {
      CAPTURE(i);
      CHECK(bitwise_equal(across.values[i], unfused.values[i]));
      CHECK(bitwise_equal(per_block.values[i], unfused.values[i]));
    }
    // Per block: f32 the add forward and, but for the first block's input, the gradient sum
    // backward (2L - 1); bf16 also the residual's cast forward and its gradient's cast (4L - 1).
    const int64_t L = c.n_layer;
    CHECK(across.dispatches == per_block.dispatches - (bf16 ? 4 * L - 1 : 2 * L - 1));
    CHECK(per_block.dispatches < unfused.dispatches);
  }
}

TEST_CASE("gpt: a bf16 residual stream (residual_dtype): fused bitwise unfused, near the f32 one") {
  const gpt::GPTConfig c = small_gpt_config();
  manual_seed(9);
  gpt::GPT model(c);
  const auto step = [&](const std::string& unfused, DType stream, bool bf16) {
    ScopedUnfused off(unfused);
    amp::clear_autocast_cache();
    model.residual_dtype = stream;
    manual_seed(3);
    BlockStep s = gpt_step(model, bf16);
    model.residual_dtype = kFloat32;
    return s;
  };
  const BlockStep fused = step("", kBFloat16, true);
  const BlockStep unfused = step("residual_layer_norm", kBFloat16, true);
  const BlockStep f32 = step("", kFloat32, true);
  REQUIRE(fused.values.size() == unfused.values.size());
  for (size_t i = 0; i < fused.values.size(); ++i) {
    CAPTURE(i);
    CHECK(bitwise_equal(fused.values[i], unfused.values[i]));
    // the stream is bf16 (other values than the f32 stream's), within bf16's rounding of it
    const Tensor a = fused.values[i].to(kFloat64), b = f32.values[i].to(kFloat64);
    if (i == 0) CHECK_FALSE(bitwise_equal(a, b));
    check_close(a, b, 5e-2, 5e-2 * largest_magnitude(b));
  }
  CHECK(fused.dispatches < unfused.dispatches);
  // Outside autocast the option changes nothing.
  const BlockStep plain = step("", kBFloat16, false), plain32 = step("", kFloat32, false);
  for (size_t i = 0; i < plain.values.size(); ++i)
    CHECK(bitwise_equal(plain.values[i], plain32.values[i]));
}
