// gpt checkpoint files (checkpoint.h) on top of nn::save_checkpoint / load_checkpoint.
#include "apps/gpt/checkpoint.h"

#include <cstdio>
#include <sstream>

#include "apps/common/accelerate.h"
#include "apps/common/checkpoints.h"
#include "optim/checkpoint.h"
#include "tensor/safetensors.h"

namespace gpt {

namespace {

std::string join_bytes(const std::vector<uint8_t>& bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size(); ++i) s += (i ? "," : "") + std::to_string(int(bytes[i]));
  return s;
}

std::vector<uint8_t> split_bytes(const std::string& s, const std::string& path) {
  std::vector<uint8_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int v = -1;
    try {
      v = std::stoi(item);
    } catch (const std::exception&) {
    }
    MINIDL_CHECK(v >= 0 && v < 256, "checkpoint '", path, "': bad vocab entry '", item, "'");
    out.push_back(uint8_t(v));
  }
  return out;
}

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
                 const std::string& path) {
  auto it = meta.find(key);
  MINIDL_CHECK(it != meta.end(), "checkpoint '", path, "' has no '", key,
               "': not a gpt checkpoint");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    MINIDL_FAIL("checkpoint '", path, "': '", key, "' = '", it->second, "' is not an integer");
  }
}

GPTConfig config_from_meta(const std::map<std::string, std::string>& meta,
                           const std::string& path) {
  GPTConfig c;
  c.block_size = meta_int(meta, "gpt.block_size", path);
  c.vocab_size = meta_int(meta, "gpt.vocab_size", path);
  // Files from before the padded vocabulary have none: their rows are their vocabulary.
  if (meta.count("gpt.padded_vocab_size"))
    c.padded_vocab_size = meta_int(meta, "gpt.padded_vocab_size", path);
  c.n_layer = meta_int(meta, "gpt.n_layer", path);
  c.n_head = meta_int(meta, "gpt.n_head", path);
  c.n_embd = meta_int(meta, "gpt.n_embd", path);
  return c;
}

bool is_synthetic(const std::map<std::string, std::string>& meta) {
  auto it = meta.find("gpt.data");
  return it != meta.end() && it->second == "synthetic";
}

bool is_bpe(const std::map<std::string, std::string>& meta) {
  auto it = meta.find("gpt.data");
  return it != meta.end() && it->second == "bpe";
}

void check_model_matches(const std::map<std::string, std::string>& meta, const GPTConfig& cfg,
                         const TokenData& data, const std::string& path) {
  const ByteVocab* vocab = data.byte_vocab();
  // The kind of tokens first: a config mismatch would hide it.
  const data::text::BPETokenizer* bpe = data.bpe();
  MINIDL_CHECK(is_bpe(meta) == (bpe != nullptr), "checkpoint '", path, "' was trained ",
               is_bpe(meta) ? "with --tokenizer (BPE tokens)" : "without --tokenizer",
               ", this run ", bpe ? "uses --tokenizer" : "does not");
  GPTConfig c = config_from_meta(meta, path);
  MINIDL_CHECK(c.block_size == cfg.block_size && c.vocab_size == cfg.vocab_size &&
                   c.padded_vocab() == cfg.padded_vocab() && c.n_layer == cfg.n_layer &&
                   c.n_head == cfg.n_head && c.n_embd == cfg.n_embd,
               "checkpoint '", path, "' holds a GPT with ", c.describe(), ", this run builds ",
               cfg.describe());
  if (bpe) {
    MINIDL_CHECK(meta.count("gpt.bpe_merges") && meta.at("gpt.bpe_merges") == bpe->merges_txt() &&
                     meta.count("gpt.bpe_vocab") && meta.at("gpt.bpe_vocab") == bpe->vocab_json(),
                 "checkpoint '", path, "' was trained with another tokenizer than --tokenizer's");
    return;
  }
  if (is_synthetic(meta)) {
    MINIDL_CHECK(!vocab, "checkpoint '", path,
                 "' was trained on --data synthetic, this run reads a text file");
    return;
  }
  auto stored = meta.find("gpt.vocab");
  MINIDL_CHECK(stored != meta.end(), "checkpoint '", path, "' has no vocabulary");
  MINIDL_CHECK(vocab, "checkpoint '", path,
               "' was trained on a text file, this run uses --data synthetic");
  MINIDL_CHECK(split_bytes(stored->second, path) == vocab->bytes(), "checkpoint '", path,
               "' was trained on a text with another byte vocabulary");
}

}  // namespace

std::map<std::string, std::string> checkpoint_metadata(const GPTConfig& cfg, const TokenData& data,
                                                       int64_t iter, const Options& o,
                                                       const Accelerator& acc) {
  const ByteVocab* vocab = data.byte_vocab();
  std::map<std::string, std::string> meta = {{"iter", std::to_string(iter)},
                                             {"gpt.block_size", std::to_string(cfg.block_size)},
                                             {"gpt.vocab_size", std::to_string(cfg.vocab_size)},
                                             {"gpt.n_layer", std::to_string(cfg.n_layer)},
                                             {"gpt.n_head", std::to_string(cfg.n_head)},
                                             {"gpt.n_embd", std::to_string(cfg.n_embd)},
                                             {"gpt.data", data.bpe() ? "bpe"
                                                          : vocab    ? "text"
                                                                     : "synthetic"},
                                             {"seed", std::to_string(o.seed)},
                                             {"batch_size", std::to_string(o.batch_size)},
                                             {"world_size", std::to_string(acc.num_processes())},
                                             {"amp", acc.amp() ? apps::amp_name(acc) : "off"}};
  if (vocab) meta["gpt.vocab"] = join_bytes(vocab->bytes());
  if (const data::text::BPETokenizer* bpe = data.bpe()) {
    meta["gpt.bpe_vocab"] = bpe->vocab_json();
    meta["gpt.bpe_merges"] = bpe->merges_txt();
  }
  if (cfg.padded_vocab() != cfg.vocab_size)
    meta["gpt.padded_vocab_size"] = std::to_string(cfg.padded_vocab());
  return meta;
}

std::map<std::string, std::string> load_training_checkpoint(Accelerator& acc,
                                                            const std::string& path,
                                                            const TokenData& data) {
  const GPT& model = dynamic_cast<const GPT&>(acc.unwrap_model());
  std::map<std::string, std::string> meta;
  try {
    meta = acc.load_state(path);
  } catch (const Error&) {
    // A GPT of another size fails there on its keys or shapes: name the configs instead (the
    // file is read a second time only on this failure path).
    SafetensorsMetadata file_meta;
    bool readable = true;
    try {
      load_safetensors(path, &file_meta);
    } catch (const Error&) {
      readable = false;
    }
    if (readable)
      check_model_matches({file_meta.begin(), file_meta.end()}, model.config, data, path);
    throw;
  }
  check_model_matches(meta, model.config, data, path);
  meta_int(meta, "iter", path);
  return meta;
}

LoadedModel load_model(const std::string& file_or_dir, Device device) {
  const std::string path = apps::resolve_resume(file_or_dir, "", "iter");
  MINIDL_CHECK(!path.empty(), "--checkpoint: no checkpoint-iter-N.safetensors in '", file_or_dir,
               "'");
  SafetensorsMetadata meta;
  auto tensors = load_safetensors(path, &meta);
  auto fmt = meta.find("format");
  MINIDL_CHECK(fmt != meta.end() && fmt->second == "minidl-checkpoint", "'", path,
               "' is not a minidl training checkpoint");
  std::map<std::string, std::string> m(meta.begin(), meta.end());
  LoadedModel out;
  GPTConfig cfg = config_from_meta(m, path);
  MINIDL_CHECK(!is_synthetic(m), "checkpoint '", path,
               "' was trained on --data synthetic: it has no byte vocabulary to encode a prompt "
               "or decode tokens, so it cannot be sampled");
  if (is_bpe(m)) {
    MINIDL_CHECK(m.count("gpt.bpe_vocab") && m.count("gpt.bpe_merges"), "checkpoint '", path,
                 "' was trained with --tokenizer but does not hold the tokenizer");
    out.bpe = std::make_shared<data::text::BPETokenizer>(data::text::BPETokenizer::from_strings(
        m.at("gpt.bpe_vocab"), m.at("gpt.bpe_merges"), "checkpoint '" + path + "'"));
    MINIDL_CHECK(out.bpe->vocab_size() == cfg.vocab_size, "checkpoint '", path, "': tokenizer of ",
                 out.bpe->vocab_size(), " tokens for a model of ", cfg.vocab_size);
  } else {
    auto vocab_it = m.find("gpt.vocab");
    MINIDL_CHECK(vocab_it != m.end(), "checkpoint '", path, "' has no vocabulary");
    out.vocab = ByteVocab(split_bytes(vocab_it->second, path));
    MINIDL_CHECK(out.vocab.size() <= cfg.vocab_size, "checkpoint '", path, "': vocabulary of ",
                 out.vocab.size(), " bytes for a model of ", cfg.vocab_size, " tokens");
  }
  out.iter = meta_int(m, "iter", path);
  out.model = std::make_shared<GPT>(cfg);
  nn::StateDict sd;
  const std::string prefix = "model.";
  for (auto& [k, v] : tensors)
    if (k.rfind(prefix, 0) == 0) sd[k.substr(prefix.size())] = v;
  try {
    out.model->load_state_dict(sd, true);
  } catch (const std::exception& e) {
    MINIDL_FAIL("checkpoint '", path, "': ", e.what());
  }
  out.model->to(device);
  return out;
}

std::vector<int64_t> LoadedModel::encode(const std::string& text) const {
  return bpe ? bpe->encode(text) : vocab.encode(text);
}

std::string LoadedModel::decode(const std::vector<int64_t>& ids) const {
  return bpe ? bpe->decode(ids) : vocab.decode(ids);
}

}  // namespace gpt
