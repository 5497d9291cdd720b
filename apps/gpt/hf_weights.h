// GPT-2 weights in Hugging Face's layout (GPT2LMHeadModel's model.safetensors) and the gpt app's
// GPT: names under "transformer." and Conv1D weights stored [in, out] (attn.c_attn, attn.c_proj,
// mlp.c_fc, mlp.c_proj), where minidl's Linear keeps [out, in]; the head is tied to wte.
#pragma once
#include <map>
#include <string>

#include "apps/gpt/model.h"

namespace gpt {

// The model's state dict from an HF GPT-2 state dict ("transformer." optional; the attention
// mask buffers "attn.bias"/"attn.masked_bias" and a tied "lm_head.weight" are skipped; wte is
// padded with zero rows to the model's padded vocabulary). Shape mismatches name the tensor,
// both shapes and `source`.
// `model` gives the names, shapes and dtypes wanted.
nn::StateDict from_hf_state_dict(const std::map<std::string, Tensor>& hf, GPT& model,
                                 const std::string& source);
// The model's weights under HF's names and layouts (wte trimmed to the real vocabulary).
std::map<std::string, Tensor> to_hf_state_dict(GPT& model);

// Loads an HF model.safetensors into `model` (strict: every weight present).
void load_hf_weights(GPT& model, const std::string& path);
// Writes `model` as an HF model.safetensors (metadata format = pt).
void save_hf_weights(GPT& model, const std::string& path);

}  // namespace gpt
