// The minidl half of the GPU pack's safetensors check against PyTorch
// (tools/gpu/safetensors_torch.py): `export` writes a seeded model's weights, an input batch and
// minidl's logits to one safetensors file; `import` loads weights and input written by PyTorch's
// safetensors.torch and writes the logits minidl computes from them. Models: the MNIST CNN
// (apps/mnist/model.h) and a small GPT (apps/gpt/model.h, fused attention). Weights are stored
// under "model.", f32, eval mode.
//
// Usage: safetensors_logits export|import --model mnist|gpt --device cpu|cuda --in FILE --out FILE
//        (export takes no --in; --seed N, default 1)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>

#include "apps/gpt/model.h"
#include "apps/mnist/model.h"
#include "minidl.h"

using namespace minidl;

namespace {

constexpr const char* kPrefix = "model.";

// The small GPT of the check: 2 blocks, 4 heads of 16 (the fused attention's f32 path), vocab 85.
gpt::GPTConfig small_gpt() {
  gpt::GPTConfig c;
  c.block_size = 32;
  c.vocab_size = 85;
  c.n_layer = 2, c.n_head = 4, c.n_embd = 64;
  return c;
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "mnist") return std::make_shared<mnist::Net>();
  if (name == "gpt") return std::make_shared<gpt::GPT>(small_gpt());
  MINIDL_FAIL("--model must be mnist or gpt, got '", name, "'");
}

Tensor make_input(const std::string& name) {
  if (name == "mnist") return randn({8, 1, 28, 28});
  return randint(0, small_gpt().vocab_size, {3, small_gpt().block_size});
}

// "model.<key>" -> "<key>" for every weight in the file.
nn::StateDict weights_of(const std::map<std::string, Tensor>& file) {
  nn::StateDict state;
  const std::string prefix = kPrefix;
  for (const auto& [key, t] : file)
    if (key.rfind(prefix, 0) == 0) state[key.substr(prefix.size())] = t;
  MINIDL_CHECK(!state.empty(), "no tensor named ", prefix, "* in the input file");
  return state;
}

Tensor logits_of(nn::Module& model, const Tensor& input, Device device) {
  NoGradGuard no_grad;
  model.eval();
  return model.forward(input.to(device)).to(kFloat32).cpu().contiguous();
}

struct Args {
  std::string command, model, device = "cpu", in, out;
  uint64_t seed = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  MINIDL_CHECK(argc >= 2, "usage: safetensors_logits export|import --model mnist|gpt ",
               "--device cpu|cuda [--in FILE] --out FILE [--seed N]");
  a.command = argv[1];
  MINIDL_CHECK(a.command == "export" || a.command == "import",
               "the command must be export or import, got '", a.command, "'");
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    MINIDL_CHECK(i + 1 < argc, flag, " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--model")
      a.model = value;
    else if (flag == "--device")
      a.device = value;
    else if (flag == "--in")
      a.in = value;
    else if (flag == "--out")
      a.out = value;
    else if (flag == "--seed")
      a.seed = std::stoull(value);
    else
      MINIDL_FAIL("unknown flag ", flag);
  }
  MINIDL_CHECK(!a.model.empty() && !a.out.empty(), "--model and --out are required");
  MINIDL_CHECK(a.command == "export" || !a.in.empty(), "import needs --in FILE");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const Device device(a.device);
    manual_seed(a.seed);
    auto model = make_model(a.model);
    std::map<std::string, Tensor> out;
    if (a.command == "export") {
      Tensor input = make_input(a.model);
      model->to(device);
      out["input"] = input;
      out["logits"] = logits_of(*model, input, device);
      for (const auto& [key, t] : model->state_dict()) out[kPrefix + key] = t.cpu().contiguous();
    } else {
      const auto file = load_safetensors(a.in);
      MINIDL_CHECK(file.count("input"), "no tensor named input in ", a.in);
      model->load_state_dict(weights_of(file), /*strict=*/true);
      model->to(device);
      out["logits"] = logits_of(*model, file.at("input"), device);
    }
    save_safetensors(out, a.out, {{"format", "pt"}});
    const Tensor& logits = out.at("logits");
    std::printf("safetensors_logits %s %s on %s: logits %s written to %s\n", a.command.c_str(),
                a.model.c_str(), device.str().c_str(), logits.shape_str().c_str(), a.out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_logits: error: %s\n", e.what());
    return 1;
  }
}
