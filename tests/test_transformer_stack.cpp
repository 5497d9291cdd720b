// TransformerEncoder, TransformerDecoderLayer and TransformerDecoder: golden values from PyTorch
// (tools/golden/gen_transformer_stack.py: outputs and input gradients, post-norm and pre-norm,
// with and without a final norm), state_dict names, independent clones, errors.
#include <doctest/doctest.h>

#include "golden.h"
#include "nn/transformer_stack.h"

using namespace minidl;
using namespace testutil;

namespace {
void load(nn::Module& m, const json& st) {
  m.to(kFloat64);
  nn::StateDict sd;
  for (auto it = st.begin(); it != st.end(); ++it)
    sd[it.key()] = golden_tensor(it.value(), kFloat64);
  auto r = m.load_state_dict(sd);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
}
Tensor gleaf(const json& o) {
  Tensor t = golden_tensor(o, kFloat64);
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE("TransformerEncoder matches PyTorch golden values (2 layers, final norm or none)") {
  for (const json& c : golden("golden_transformer_stack.json")["encoder"]) {
    const bool nf = c["norm_first"].get<bool>(), final_norm = c["final_norm"].get<bool>();
    CAPTURE(nf);
    nn::TransformerEncoderLayer layer(4, 2,
                                      {.dim_feedforward = 6, .dropout = 0.0, .norm_first = nf});
    nn::TransformerEncoder enc(layer, 2, final_norm ? std::make_shared<nn::LayerNorm>(4) : nullptr);
    load(enc, c["state"]);
    enc.eval();
    Tensor src = gleaf(c["src"]);
    Tensor out = enc.forward(src, {}, golden_tensor(c["key_padding_mask"], kBool));
    check_close(out, golden_values(c["out"]), 1e-9, 1e-10);
    sum(out * golden_tensor(c["gout"], kFloat64)).backward();
    check_close(src.grad(), golden_values(c["grad_src"]), 1e-9, 1e-10);
  }
}

TEST_CASE("TransformerDecoder matches PyTorch golden values (causal tgt_mask, memory padding)") {
  for (const json& c : golden("golden_transformer_stack.json")["decoder"]) {
    const bool nf = c["norm_first"].get<bool>(), final_norm = c["final_norm"].get<bool>();
    CAPTURE(nf);
    nn::TransformerDecoderLayer layer(4, 2,
                                      {.dim_feedforward = 6,
                                       .dropout = 0.0,
                                       .activation = c["activation"].get<std::string>(),
                                       .norm_first = nf});
    nn::TransformerDecoder dec(layer, 2, final_norm ? std::make_shared<nn::LayerNorm>(4) : nullptr);
    load(dec, c["state"]);
    dec.eval();
    Tensor tgt = gleaf(c["tgt"]), memory = gleaf(c["memory"]);
    Tensor out = dec.forward(tgt, memory, golden_tensor(c["tgt_mask"], kBool), {}, {},
                             golden_tensor(c["memory_key_padding_mask"], kBool));
    check_close(out, golden_values(c["out"]), 1e-9, 1e-10);
    sum(out * golden_tensor(c["gout"], kFloat64)).backward();
    check_close(tgt.grad(), golden_values(c["grad_tgt"]), 1e-9, 1e-10);
    check_close(memory.grad(), golden_values(c["grad_memory"]), 1e-9, 1e-10);
  }
}

TEST_CASE("TransformerDecoderLayer: tgt_is_causal equals the causal tgt_mask, layers are clones") {
  manual_seed(11);
  nn::TransformerDecoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  layer.eval();
  Tensor tgt = random_tensor({2, 5, 8}, kFloat32, 1), mem = random_tensor({2, 3, 8}, kFloat32, 2);
  Tensor causal = triu(ones({5, 5}, kBool), 1);
  check_close(layer.forward(tgt, mem, {}, {}, {}, {}, true), layer.forward(tgt, mem, causal), 1e-5,
              1e-6);
  nn::TransformerDecoder dec(layer, 3);
  CHECK(dec.layers->size() == 3);
  CHECK(dec.parameters().size() == 3 * layer.parameters().size());
  // The clones start equal to the layer but own their weights (torch's deep copies).
  CHECK(bitwise_equal((*dec.layers)[2]->linear1->weight, layer.linear1->weight));
  CHECK_FALSE((*dec.layers)[0]->linear1->weight.is_same((*dec.layers)[1]->linear1->weight));
  CHECK(dec.state_dict().count("layers.2.multihead_attn.in_proj_weight") == 1);
  CHECK(dec.state_dict().count("norm.weight") == 0);
  CHECK_THROWS_WITH_AS(nn::TransformerDecoder(layer, 0), doctest::Contains("num_layers"), Error);
  nn::TransformerEncoderLayer el(8, 2, {.dim_feedforward = 16});
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder(el, 0), doctest::Contains("num_layers"), Error);
}
