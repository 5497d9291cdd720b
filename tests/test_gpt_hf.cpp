// GPT-2 weights in Hugging Face's layout (apps/gpt/hf_weights.h): a GPT-2 built and saved by
// PyTorch under HF's names (tools/golden/gen_gpt_hf.py: Conv1D [in, out], mask buffers, tied head)
// loads with PyTorch's logits and greedy continuation; the exporter's file (with the extras an HF
// file may hold) loads back to the golden logits; wrong shapes fail with one line.
#include <doctest/doctest.h>

#include <filesystem>

#include <unistd.h>

#include "apps/gpt/hf_weights.h"
#include "dist_test_util.h"
#include "golden.h"
#include "minidl.h"
#include "tensor/safetensors.h"

using namespace minidl;
using namespace testutil;
namespace fs = std::filesystem;

namespace {

gpt::GPTConfig golden_config() {
  const json& c = golden("golden_gpt.json")["config"];
  gpt::GPTConfig cfg;
  cfg.vocab_size = c["vocab_size"], cfg.block_size = c["block_size"];
  cfg.n_embd = c["n_embd"], cfg.n_head = c["n_head"], cfg.n_layer = c["n_layer"];
  return cfg;
}

std::shared_ptr<gpt::GPT> golden_model() {
  auto m = std::make_shared<gpt::GPT>(golden_config());
  nn::StateDict sd;
  for (auto& [name, t] : golden("golden_gpt.json")["state_dict"].items())
    sd[name] = golden_tensor(t, kFloat32);
  m->load_state_dict(sd, true);
  return m;
}

}  // namespace

TEST_CASE("gpt: Hugging Face GPT-2 weights out and in give PyTorch's logits") {
  const json& g = golden("golden_gpt.json");
  const fs::path dir = fs::temp_directory_path() / ("minidl_hf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "model.safetensors").string();
  auto src = golden_model();
  std::map<std::string, Tensor> hf = gpt::to_hf_state_dict(*src);
  // HF's names and Conv1D layout: c_attn [in, out] = [16, 48].
  REQUIRE(hf.count("transformer.h.0.attn.c_attn.weight"));
  CHECK(hf.at("transformer.h.0.attn.c_attn.weight").shape() == Shape{16, 48});
  CHECK(hf.at("transformer.h.1.mlp.c_proj.weight").shape() == Shape{64, 16});
  CHECK(hf.at("transformer.wte.weight").shape() == Shape{11, 16});
  CHECK(hf.count("transformer.ln_f.bias") == 1);
  // What HF files may also hold: the causal-mask buffers and the tied head.
  hf["transformer.h.0.attn.bias"] = ones({1, 1, 8, 8});
  hf["transformer.h.1.attn.masked_bias"] = full({}, -1e4);
  hf["lm_head.weight"] = hf.at("transformer.wte.weight");
  save_safetensors(hf, file, {{"format", "pt"}});

  manual_seed(123);  // other initial weights: the file must replace every one
  gpt::GPT loaded(golden_config());
  gpt::load_hf_weights(loaded, file);
  CHECK(loaded.lm_head->weight.is_same(loaded.wte->weight));  // still tied
  const Tensor x = golden_tensor(g["x"], kInt64);
  check_close(loaded(x), golden_values(g["logits"]), 1e-5, 1e-5);
  // Greedy decoding continues the same way from the loaded weights and the originals.
  Generator g1(1), g2(1);
  const Tensor prompt = x.narrow(0, 0, 1).narrow(1, 0, 3);
  CHECK(equal(gpt::generate(loaded, prompt, 4, 1.0, 1, g1),
              gpt::generate(*src, prompt, 4, 1.0, 1, g2)));

  // A padded vocabulary (GPT-2's 50257 -> 50304 rows): wte gets zero rows.
  gpt::GPTConfig padded_cfg = golden_config();
  padded_cfg.padded_vocab_size = 16;
  gpt::GPT padded(padded_cfg);
  gpt::load_hf_weights(padded, file);
  CHECK(padded.wte->weight.size(0) == 16);
  CHECK(equal(padded.wte->weight.narrow(0, 11, 5), zeros({5, 16})));
  // Export trims the padding back.
  CHECK(gpt::to_hf_state_dict(padded).at("transformer.wte.weight").shape() == Shape{11, 16});

  // Another shape: one line naming the tensor and both shapes.
  gpt::GPTConfig wide = golden_config();
  wide.n_embd = 32;
  gpt::GPT other(wide);
  const std::string e = disttest::expect_error([&] { gpt::load_hf_weights(other, file); }).message;
  CHECK(e.find("is [") != std::string::npos);
  CHECK(e.find("needs [") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
  gpt::GPTConfig deeper = golden_config();
  deeper.n_layer = 3;
  gpt::GPT more(deeper);
  CHECK(disttest::expect_error([&] {
          gpt::load_hf_weights(more, file);
        }).message.find("no 'h.2.") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE(
    "gpt: a GPT-2 saved by PyTorch under HF's names loads with PyTorch's logits and greedy text") {
  // tools/golden/gen_gpt_hf.py: an HF-layout module (Conv1D [in, out], mask buffers, tied head)
  // built and run in PyTorch, saved as model.safetensors.
  const json& g = golden("golden_gpt_hf.json");
  manual_seed(5);
  gpt::GPT m(golden_config());
  gpt::load_hf_weights(m, std::string(MINIDL_TEST_DATA_DIR) + "/gpt_hf_tiny.safetensors");
  const Tensor x = golden_tensor(golden("golden_gpt.json")["x"], kInt64);
  check_close(m(x), golden_values(g["logits"]), 1e-5, 1e-5);
  const std::vector<int64_t> prompt = g["prompt"].get<std::vector<int64_t>>();
  const std::vector<int64_t> want = g["greedy"].get<std::vector<int64_t>>();
  Generator gen(1);
  const Tensor out = gpt::generate(m, tensor(prompt).reshape({1, int64_t(prompt.size())}),
                                   int64_t(want.size() - prompt.size()), 1.0, /*top_k=*/1, gen);
  const Tensor flat = out.reshape({-1}).contiguous();
  CHECK(std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel()) ==
        want);
}
