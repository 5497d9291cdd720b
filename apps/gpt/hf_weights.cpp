// Hugging Face GPT-2 names and layouts in and out (apps/gpt/hf_weights.h).
#include "apps/gpt/hf_weights.h"

#include "tensor/safetensors.h"

namespace gpt {
namespace {

// HF's Conv1D weights: [in, out].
bool is_conv1d_weight(const std::string& name) {
  for (const char* s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string suffix(s);
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

nn::StateDict from_hf_state_dict(const std::map<std::string, Tensor>& hf, GPT& model,
                                 const std::string& source) {
  const GPTConfig& cfg = model.config;
  const nn::StateDict want = model.state_dict();  // the expected shapes, by minidl's names
  nn::StateDict out;
  for (const auto& [hf_name, t] : hf) {
    std::string name = hf_name.rfind("transformer.", 0) == 0 ? hf_name.substr(12) : hf_name;
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    if (name == "lm_head.weight") continue;  // tied to wte
    auto it = want.find(name);
    MINIDL_CHECK(it != want.end(), source, ": '", hf_name,
                 "' is not a GPT-2 weight this model has (", cfg.describe(), ")");
    Tensor w = is_conv1d_weight(name) ? t.t().contiguous() : t;
    const Shape& shape = it->second.shape();
    if (name == "wte.weight" && w.dim() == 2 && w.size(0) < shape[0] && w.size(1) == shape[1]) {
      MINIDL_CHECK(w.size(0) == cfg.vocab_size, source, ": wte.weight has ", w.size(0),
                   " rows, the model's vocabulary is ", cfg.vocab_size);
      Tensor padded = zeros(shape, w.dtype());
      padded.narrow(0, 0, w.size(0)).copy_(w);
      w = padded;
    }
    MINIDL_CHECK(w.shape() == shape, source, ": '", hf_name, "' is ", t.shape_str(),
                 is_conv1d_weight(name) ? " ([in, out], HF's Conv1D)" : "", ", the model (",
                 cfg.describe(), ") needs ",
                 shape_str(is_conv1d_weight(name) ? Shape{shape[1], shape[0]} : shape));
    out[name] = w.to(it->second.dtype());
  }
  for (const auto& [name, t] : want)
    MINIDL_CHECK(out.count(name) || name == "lm_head.weight", source, ": no '", name,
                 "' (nor 'transformer.", name, "'): not a GPT-2 of ", cfg.describe());
  return out;
}

std::map<std::string, Tensor> to_hf_state_dict(GPT& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : model.state_dict()) {
    if (name == "lm_head.weight") continue;
    Tensor w = t.detach().cpu();
    if (name == "wte.weight") w = w.narrow(0, 0, model.config.vocab_size);
    if (is_conv1d_weight(name)) w = w.t();
    out["transformer." + name] = w.contiguous();
  }
  return out;
}

void load_hf_weights(GPT& model, const std::string& path) {
  const std::map<std::string, Tensor> hf = load_safetensors(path);
  nn::StateDict sd = from_hf_state_dict(hf, model, "'" + path + "'");
  const Device device = model.wte->weight.device();
  for (auto& [name, t] : sd) t = t.to(device);
  model.load_state_dict(sd, /*strict=*/false);  // the tied head has no entry of its own
}

void save_hf_weights(GPT& model, const std::string& path) {
  save_safetensors(to_hf_state_dict(model), path, {{"format", "pt"}});
}

}  // namespace gpt
