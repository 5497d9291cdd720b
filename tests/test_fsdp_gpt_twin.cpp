// FSDP's full checkpoint reaches PyTorch: the gpt app's 2-layer GPT loaded with PyTorch's
// weights (tools/golden/gen_gpt.py), sharded over 2 ranks, gathered by full_state_dict(), saved
// as safetensors and loaded into a plain GPT gives PyTorch's logits (f32, 1e-5).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "apps/gpt/model.h"
#include "ddp_test_util.h"
#include "golden.h"
#include "minidl.h"
#include "parallel/fsdp/fsdp.h"
#include "tensor/safetensors.h"

using namespace minidl;
using namespace minidl::dist;
using namespace testutil;
using ddptest::report;
namespace fs = std::filesystem;

namespace {

gpt::GPTConfig golden_config() {
  const json& c = testutil::golden("golden_gpt.json")["config"];
  gpt::GPTConfig cfg;
  cfg.vocab_size = c["vocab_size"], cfg.block_size = c["block_size"];
  cfg.n_embd = c["n_embd"], cfg.n_head = c["n_head"], cfg.n_layer = c["n_layer"];
  return cfg;
}

// The largest |a - b| / max(1, |b|) over the elements.
double max_rel(const Tensor& a, const std::vector<double>& b) {
  Tensor x = a.to(kFloat64).contiguous();
  const double* p = x.data_ptr<double>();
  double worst = x.numel() == int64_t(b.size()) ? 0 : INFINITY;
  for (size_t i = 0; i < b.size() && worst < INFINITY; ++i)
    worst = std::max(worst, std::abs(p[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

}  // namespace

TEST_CASE("FSDP full state dict -> safetensors -> plain GPT gives PyTorch's logits") {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_twin_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "full.safetensors").string();
  ddptest::run_ranks(2, [&](int rank, std::shared_ptr<ProcessGroup> pg) {
    const json& g = testutil::golden("golden_gpt.json");
    bool ok = true;
    auto model = std::make_shared<gpt::GPT>(golden_config());
    nn::StateDict torch_weights;
    for (auto& [name, t] : g["state_dict"].items())
      torch_weights[name] = testutil::golden_tensor(t, kFloat32);
    model->load_state_dict(torch_weights, true);
    FSDPOptions o;
    o.auto_wrap_policy = module_wrap_policy<nn::TransformerBlock>();
    o.flat_param_split = [](const std::string&, const Tensor& p) { return p.dim() >= 2 ? 0 : 1; };
    FSDP fsdp(model, pg, o);
    int64_t held = 0, total = 0;
    for (const auto& u : fsdp.units()) held += u->shard_numel(), total += u->numel();
    ok = report(rank, 2 * held >= total && 2 * held < total + 2 * int64_t(fsdp.units().size()),
                "each rank holds half of every unit") &&
         ok;
    const nn::StateDict full = fsdp.full_state_dict();  // collective
    if (rank == 0) save_safetensors(full, file);
    pg->barrier()->wait();

    manual_seed(99);  // different initial weights: the file must replace every one
    auto plain = std::make_shared<gpt::GPT>(golden_config());
    plain->load_state_dict(load_safetensors(file), /*strict=*/true);
    const Tensor x = testutil::golden_tensor(g["x"], kInt64);
    const double err = max_rel((*plain)(x), testutil::golden_values(g["logits"]));
    ok = report(rank, err <= 1e-5, "plain model's logits vs PyTorch: " + std::to_string(err)) && ok;
    // The sharded model itself agrees (evaluated through its wrapper).
    NoGradGuard no_grad;
    const double err_fsdp = max_rel(fsdp(x), testutil::golden_values(g["logits"]));
    ok = report(rank, err_fsdp <= 1e-5,
                "FSDP model's logits vs PyTorch: " + std::to_string(err_fsdp)) &&
         ok;
    return ok;
  });
  fs::remove_all(dir);
}
