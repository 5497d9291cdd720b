// The gpt app's GPT-2 124M preset and padded vocabulary (apps/gpt/model.h): the parameter count
// from the config (llm.c's 124,475,904) against built models, padded logits kept out of the loss
// (their rows get no gradient), and the synthetic tokens of --data synthetic (text_data.h).
#include <doctest/doctest.h>

#include "apps/gpt/model.h"
#include "apps/gpt/text_data.h"
#include "minidl.h"
#include "test_util.h"

using namespace minidl;
using testutil::bitwise_equal;

namespace {

gpt::GPTConfig small_config(int64_t vocab, int64_t padded) {
  gpt::GPTConfig c;
  c.block_size = 16, c.vocab_size = vocab, c.padded_vocab_size = padded;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 24;
  return c;
}

}  // namespace

TEST_CASE("gpt config: GPT-2 124M counts llm.c's 124475904 parameters") {
  const gpt::GPTConfig c = gpt::gpt2_124m_config();
  CHECK(c.vocab_size == 50257);
  CHECK(c.padded_vocab() == 50304);
  CHECK(c.block_size == 1024);
  CHECK(c.n_layer == 12);
  CHECK(c.n_head == 12);
  CHECK(c.n_embd == 768);
  CHECK(c.num_parameters() == 124475904);
  // llm.c's sum: wte Vp·C, wpe maxT·C, per layer ln 4C, qkv 3C²+3C, proj C²+C, fc 4C²+4C,
  // fcproj 4C²+C; ln_f 2C.
  const int64_t C = 768, L = 12;
  CHECK(c.num_parameters() ==
        50304 * C + 1024 * C +
            L * (4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) +
            2 * C);
  CHECK(c.describe() == "12 layers x 768, 12 heads, block 1024, vocab 50257 (padded to 50304)");
  // llm.c's gpt2_estimate_mfu: 6·N + 6·L·C·T.
  CHECK(c.flops_per_token(1024) == doctest::Approx(6.0 * 124475904 + 6.0 * 12 * 768 * 1024));
}

TEST_CASE("gpt config: num_parameters equals the built model's, padded or not, tied once") {
  for (auto [vocab, padded] : {std::pair<int64_t, int64_t>{37, 0}, {37, 64}, {64, 64}}) {
    CAPTURE(vocab);
    CAPTURE(padded);
    const gpt::GPTConfig c = small_config(vocab, padded);
    gpt::GPT m(c);
    CHECK(m.num_parameters() == c.num_parameters());
    CHECK(m.wte->weight.shape() == Shape{c.padded_vocab(), 24});
    CHECK(m.lm_head->weight.is_same(m.wte->weight));
  }
  gpt::GPTConfig no_bias = small_config(37, 64);
  no_bias.bias = false;
  CHECK(gpt::GPT(no_bias).num_parameters() == no_bias.num_parameters());
  CHECK_THROWS_WITH_AS(gpt::GPT(small_config(65, 64)),
                       doctest::Contains("padded_vocab_size 64 is smaller than vocab_size 65"),
                       Error);
}

TEST_CASE("gpt config: padded logits stay out of the loss, the real ones equal an unpadded model") {
  manual_seed(3);
  gpt::GPT padded(small_config(37, 64));
  padded.to(kFloat64);
  // The same weights without the padded rows.
  gpt::GPT plain(small_config(37, 0));
  plain.to(kFloat64);
  nn::StateDict sd = padded.state_dict();
  sd["wte.weight"] = sd["lm_head.weight"] = sd["wte.weight"].slice(0, 0, 37).contiguous();
  plain.load_state_dict(sd, true);
  Tensor x = randint(0, 37, {2, 16}, kInt64), y = randint(0, 37, {2, 16}, kInt64);
  Tensor logits = padded.forward(x);
  CHECK(logits.shape() == Shape{2, 16, 37});
  Tensor expected = plain.forward(x);
  CHECK(allclose(logits, expected, 1e-12, 1e-12));
  Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, 37}), y.reshape({-1}));
  loss.backward();
  // The padded rows are neither looked up nor in the loss: exactly zero gradient.
  Tensor g = padded.wte->weight.grad();
  REQUIRE(g.defined());
  CHECK(g.slice(0, 37, 64).abs().max().item<double>() == 0.0);
  CHECK(g.slice(0, 0, 37).abs().max().item<double>() > 0.0);
  // Sampling sees the real tokens only.
  Generator gen(1);
  Tensor out = gpt::generate(padded, x.slice(0, 0, 1).slice(1, 0, 2), 40, 1.0, 0, gen);
  CHECK(out.max().item<int64_t>() < 37);
}

TEST_CASE("gpt config: synthetic tokens are uniform below V, seeded, y is x shifted") {
  gpt::SyntheticTokens data(50257, 64);
  CHECK(data.vocab_size() == 50257);
  CHECK(data.byte_vocab() == nullptr);
  CHECK(data.describe() == "synthetic uniform tokens in [0, 50257)");
  Generator g1(5), g2(5), g3(6);
  gpt::Batch a = data.get_batch("train", 4, g1), b = data.get_batch("train", 4, g2);
  gpt::Batch c = data.get_batch("val", 4, g3);
  CHECK(a.x.shape() == Shape{4, 64});
  CHECK(a.y.shape() == Shape{4, 64});
  CHECK(a.x.dtype() == kInt64);
  CHECK(bitwise_equal(a.x, b.x));
  CHECK(bitwise_equal(a.y, b.y));
  CHECK_FALSE(bitwise_equal(a.x, c.x));
  CHECK(bitwise_equal(a.x.slice(1, 1, 64), a.y.slice(1, 0, 63)));
  CHECK(a.x.min().item<int64_t>() >= 0);
  CHECK(a.y.max().item<int64_t>() < 50257);
  // Over 4·65 draws from 50257 values, the largest one is far above the byte range.
  CHECK(a.x.max().item<int64_t>() > 256);
  CHECK_THROWS_WITH_AS(data.get_batch("test", 1, g1), doctest::Contains("train or val"), Error);
  CHECK_THROWS_WITH_AS(gpt::SyntheticTokens(0, 8), doctest::Contains("got 0"), Error);
}
