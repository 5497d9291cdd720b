// torchvision's ResNets (nn/models/resnet.h) against torchvision 0.14.1
// (tools/golden/gen_resnet.py): state_dict keys and shapes, named_modules and parameter counts of
// resnet18/34/50; the logits of resnet18 (eval, and train mode with the running statistics it
// updates) and resnet50 (eval) with formula-filled weights that travel through a safetensors
// file and load_state_dict (a torchvision checkpoint's path); torchvision's init,
// zero_init_residual, convert_sync_batchnorm, module hooks; resnet-mini's keys and outputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "golden.h"
#include "minidl.h"
#include "nn/models/resnet.h"
#include "nn/models/resnet_mini.h"
#include "safetensors_test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const json& arch_golden(const std::string& arch) {
  return golden("golden_resnet.json")["models"][arch];
}

// The golden script's formula for element i of the k-th state_dict entry (gen_resnet.py's
// header): s = 2u - 1 with u in [0, 1) from a splitmix64-style hash of (i, k), exact in f64;
// the values computed in f64 and stored as f32.
double hashed_uniform(uint64_t k, uint64_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull + k * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return 2 * (double(h >> 11) * 0x1p-53) - 1;
}

Tensor formula_tensor(int64_t k, const std::string& name, const Shape& shape) {
  if (name.ends_with("num_batches_tracked")) return zeros(shape, kInt64);
  enum { small, var, weight, bn_weight } kind = bn_weight;  // small: 0.1 * s
  if (name.ends_with("running_mean") || name.ends_with("bias"))
    kind = small;
  else if (name.ends_with("running_var"))
    kind = var;
  else if (shape.size() >= 2)
    kind = weight;
  const int64_t n = shape_numel(shape);
  const double root_fan_in = shape.size() >= 2 ? std::sqrt(double(n / shape[0])) : 1;
  Tensor t = empty(shape, kFloat32);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double s = hashed_uniform(uint64_t(k), uint64_t(i));
    const double v = kind == small    ? 0.1 * s
                     : kind == var    ? 1 + 0.5 * std::abs(s)
                     : kind == weight ? 2 * s / root_fan_in
                                      : 1 + 0.25 * s;
    p[i] = float(v);
  }
  return t;
}

// Loads the formula's state dict (torchvision's keys), written with save_safetensors to `dir`
// and read back, into `m`: the path of a torchvision checkpoint converted to safetensors.
void load_formula_checkpoint(models::ResNet& m, const std::string& arch) {
  sttest::TempDir dir;
  std::map<std::string, Tensor> sd;
  int64_t k = 0;
  for (const auto& entry : arch_golden(arch)["state_dict"]) {
    const std::string name = entry[0];
    sd[name] = formula_tensor(k++, name, entry[1].get<Shape>());
  }
  const std::string file = (dir.path / (arch + ".safetensors")).string();
  save_safetensors(sd, file, {{"format", "pt"}});
  const nn::LoadStateDictResult res = m.load_state_dict(load_safetensors(file), true);
  CHECK(res.missing_keys.empty());
  CHECK(res.unexpected_keys.empty());
}

// state_dict keys (all of them), shapes and dtypes; named_modules in torchvision's order with
// its class names (ReLU, MaxPool2d, AdaptiveAvgPool2d hold no tensors: only this sees them);
// the parameter count.
void check_torchvision_layout(const std::shared_ptr<models::ResNet>& m, const std::string& arch) {
  const json& g = arch_golden(arch);
  const nn::StateDict sd = m->state_dict();
  CHECK(sd.size() == g["state_dict"].size());
  for (const auto& entry : g["state_dict"]) {
    const std::string key = entry[0];
    auto it = sd.find(key);
    REQUIRE_MESSAGE(it != sd.end(), "missing key ", key);
    CHECK_MESSAGE(it->second.shape() == entry[1].get<Shape>(), key, " ", it->second.shape_str());
    CHECK(it->second.dtype() == (key.ends_with("num_batches_tracked") ? kInt64 : kFloat32));
  }
  const auto modules = m->named_modules();
  REQUIRE(modules.size() == g["modules"].size());
  for (size_t i = 0; i < modules.size(); ++i) {
    CHECK(modules[i].first == g["modules"][i][0].get<std::string>());
    CHECK(modules[i].second->name() == g["modules"][i][1].get<std::string>());
  }
  int64_t n = 0;
  for (const Tensor& p : m->parameters()) n += p.numel();
  CHECK(n == g["num_parameters"].get<int64_t>());
}

// x:[2,3,64,64], x[i] = sin(0.013 i).
Tensor golden_input() {
  std::vector<double> v(2 * 3 * 64 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.013 * double(i));
  return from_f64(v, {2, 3, 64, 64});
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to_f64(t)) m = std::max(m, std::abs(v));
  return m;
}
double min_of(const Tensor& t) {
  const std::vector<double> v = to_f64(t);
  return *std::min_element(v.begin(), v.end());
}

// max |got - want| <= tol * max |want| (and equal shapes).
void check_close_rel(const Tensor& got, const json& want, double tol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want["shape"].get<Shape>(), what, ": shape ", got.shape_str());
  const std::vector<double> g = to_f64(got), w = golden_values(want);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  CHECK_MESSAGE(diff <= tol * scale, what, ": max abs diff ", diff, " vs max abs golden ", scale);
}

// Eval-mode logits on the golden input equal torchvision's, and every module ran through
// operator() (its forward hooks fired: FSDP and the hooks rely on it).
void check_eval_logits(const std::shared_ptr<models::ResNet>& m, const std::string& arch) {
  std::map<std::string, int> calls;
  std::vector<nn::Module::RemovableHandle> handles;
  for (const auto& [name, child] : m->named_modules()) {
    handles.push_back(child->register_forward_hook(
        [&calls, name = name](nn::Module&, const std::vector<Tensor>&, const Tensor&) {
          ++calls[name];
          return std::optional<Tensor>();
        }));
  }
  m->eval();
  NoGradGuard no_grad;
  check_close_rel((*m)(golden_input()), arch_golden(arch)["logits_eval"], 1e-4,
                  arch + " eval logits");
  for (const auto& [name, child] : m->named_modules()) CHECK_MESSAGE(calls[name] >= 1, name);
  for (auto& h : handles) h.remove();
}

}  // namespace

TEST_SUITE("resnet_models") {
  TEST_CASE("resnet18: torchvision's keys, modules, parameter count, eval and train logits") {
    const json& g = arch_golden("resnet18");
    auto m = models::resnet18();
    check_torchvision_layout(m, "resnet18");
    load_formula_checkpoint(*m, "resnet18");
    check_eval_logits(m, "resnet18");
    // Train mode: batch statistics, and the running statistics updated as torch does.
    m->train();
    NoGradGuard no_grad;
    check_close_rel((*m)(golden_input()), g["logits_train"], 1e-4, "resnet18 train logits");
    const nn::StateDict sd = m->state_dict();
    for (const auto& [key, want] : g["after_train"].items())
      check_close_rel(sd.at(key), want, 1e-4, key);
    CHECK(sd.at("layer3.0.downsample.1.num_batches_tracked").item<int64_t>() == 1);
  }

  TEST_CASE("resnet34: torchvision's keys, modules and parameter count") {
    check_torchvision_layout(models::resnet34(), "resnet34");
  }

  TEST_CASE("resnet50: torchvision's keys, modules, parameter count and eval logits") {
    auto m = models::resnet50();
    check_torchvision_layout(m, "resnet50");
    load_formula_checkpoint(*m, "resnet50");
    check_eval_logits(m, "resnet50");
  }

  TEST_CASE("resnet: torchvision's init, zero_init_residual, num_classes, convert_sync_batchnorm") {
    auto m = models::resnet18(10, /*zero_init_residual=*/true);
    const nn::StateDict sd = m->state_dict();
    CHECK(sd.at("fc.weight").shape() == Shape{10, 512});
    // kaiming_normal_(fan_out, relu): std sqrt(2 / (512*9)) for layer4's 3x3 convs.
    const std::vector<double> w = to_f64(sd.at("layer4.1.conv2.weight"));
    double sq = 0;
    for (double v : w) sq += v * v;
    CHECK(std::sqrt(sq / double(w.size())) == doctest::Approx(std::sqrt(2.0 / 4608)).epsilon(0.01));
    // Linear's default: U(-1/sqrt(512), 1/sqrt(512)).
    CHECK(max_abs(sd.at("fc.weight")) <= 1 / std::sqrt(512.0));
    CHECK(max_abs(sd.at("fc.weight")) > 0.9 / std::sqrt(512.0));
    for (const auto& [key, t] : sd) {
      CAPTURE(key);
      if (key.ends_with("bn2.weight")) CHECK(max_abs(t) == 0);  // zero_init_residual
      if (key.ends_with("bn1.weight") || key.ends_with("downsample.1.weight"))
        CHECK(min_of(t) == 1);
      if (key != "fc.bias" && key.ends_with(".bias")) CHECK(max_abs(t) == 0);
    }
    // Bottleneck: bn3 starts at zero; the stride sits on the 3x3 conv2 (v1.5).
    auto b = models::ResNet(models::ResNetBlock::bottleneck, {1, 1, 1, 1},
                            {.num_classes = 3, .zero_init_residual = true});
    auto blk = std::dynamic_pointer_cast<models::Bottleneck>((*b.layer2)[0]);
    REQUIRE(blk != nullptr);
    CHECK(blk->conv1->stride.h == 1);
    CHECK(blk->conv2->stride.h == 2);
    CHECK(max_abs(b.state_dict().at("layer2.0.bn3.weight")) == 0);
    CHECK(min_of(b.state_dict().at("layer2.0.bn2.weight")) == 1);
    // The BatchNorm slots (downsample.1 included) take a SyncBatchNorm.
    nn::convert_sync_batchnorm(m);
    int sync = 0;
    for (const auto& [name, mod] : m->named_modules()) sync += mod->name() == "SyncBatchNorm";
    CHECK(sync == 20);
    CHECK(m->state_dict().size() == sd.size());
    // Wrong inputs name the model.
    CHECK_THROWS_WITH_AS((*m)(zeros({1, 1, 32, 32})), doctest::Contains("ResNet: expected"), Error);
    CHECK_THROWS_WITH_AS(models::ResNet(models::ResNetBlock::basic, {2, 2, 2}),
                         doctest::Contains("4 layers"), Error);
  }

  TEST_CASE("resnet_mini: the keys of mnist_ddp's checkpoints, log-probabilities or logits") {
    auto m = models::resnet_mini();
    std::vector<std::string> keys;
    for (const auto& [k, t] : m->state_dict()) keys.push_back(k);
    const std::vector<std::string> want = {"block1.bn1.bias",
                                           "block1.bn1.num_batches_tracked",
                                           "block1.bn1.running_mean",
                                           "block1.bn1.running_var",
                                           "block1.bn1.weight",
                                           "block1.bn2.bias",
                                           "block1.bn2.num_batches_tracked",
                                           "block1.bn2.running_mean",
                                           "block1.bn2.running_var",
                                           "block1.bn2.weight",
                                           "block1.conv1.weight",
                                           "block1.conv2.weight",
                                           "block2.bn1.bias",
                                           "block2.bn1.num_batches_tracked",
                                           "block2.bn1.running_mean",
                                           "block2.bn1.running_var",
                                           "block2.bn1.weight",
                                           "block2.bn2.bias",
                                           "block2.bn2.num_batches_tracked",
                                           "block2.bn2.running_mean",
                                           "block2.bn2.running_var",
                                           "block2.bn2.weight",
                                           "block2.conv1.weight",
                                           "block2.conv2.weight",
                                           "block2.shortcut_bn.bias",
                                           "block2.shortcut_bn.num_batches_tracked",
                                           "block2.shortcut_bn.running_mean",
                                           "block2.shortcut_bn.running_var",
                                           "block2.shortcut_bn.weight",
                                           "block2.shortcut_conv.weight",
                                           "fc.bias",
                                           "fc.weight",
                                           "stem.weight",
                                           "stem_bn.bias",
                                           "stem_bn.num_batches_tracked",
                                           "stem_bn.running_mean",
                                           "stem_bn.running_var",
                                           "stem_bn.weight"};
    CHECK(keys == want);
    CHECK(m->state_dict().at("stem.weight").shape() == Shape{16, 1, 3, 3});
    CHECK(m->state_dict().at("fc.weight").shape() == Shape{10, 32});
    m->eval();
    NoGradGuard no_grad;
    const Tensor y = (*m)(random_tensor({2, 1, 28, 28}, kFloat32, 7));
    REQUIRE(y.shape() == Shape{2, 10});
    for (double s : to_f64(sum(exp(y), {1}))) CHECK(s == doctest::Approx(1).epsilon(1e-5));
    // Another input size and class count, logits out.
    auto rgb = models::resnet_mini(3, 7, /*log_softmax=*/false);
    const Tensor z = (*rgb)(random_tensor({2, 3, 32, 32}, kFloat32, 8));
    REQUIRE(z.shape() == Shape{2, 7});
    CHECK(to_f64(sum(exp(z), {1}))[0] != doctest::Approx(1).epsilon(1e-3));
  }

}  // TEST_SUITE
