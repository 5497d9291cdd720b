// gpt checkpoints: one atomic safetensors file with the model, AdamW state, AMP state, every
// rank's RNG state, and the model config and byte vocabulary (or "synthetic") as metadata, so
// `gpt sample` can rebuild the model from the file alone.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "parallel/accelerator/accelerator.h"
#include "apps/gpt/model.h"
#include "apps/gpt/trainer.h"
#include "apps/gpt/text_data.h"

namespace gpt {

// The metadata a training checkpoint (Accelerator::save_state) carries besides the state: the
// iteration, the model config and byte vocabulary (so `gpt sample` can rebuild the model from
// the file alone; `vocab` nullptr: gpt.data = synthetic, no vocabulary), seed, batch size,
// world size and AMP level.
// A --tokenizer run stores its tokenizer's vocab.json and merges.txt in the metadata (gpt.data =
// bpe), so the file alone encodes prompts and decodes samples.
std::map<std::string, std::string> checkpoint_metadata(const GPTConfig& cfg, const TokenData& data,
                                                       int64_t iter, const Options& o,
                                                       const Accelerator& acc);

// acc.load_state(path) after checking that the file holds a GPT of the run's config and
// vocabulary (nullptr: synthetic tokens) (else throws naming the file and both); returns the
// metadata (with "iter").
std::map<std::string, std::string> load_training_checkpoint(Accelerator& acc,
                                                            const std::string& path,
                                                            const TokenData& data);

struct LoadedModel {
  std::shared_ptr<GPT> model;
  ByteVocab vocab;                                // a byte-level run's
  std::shared_ptr<data::text::BPETokenizer> bpe;  // a --tokenizer run's
  int64_t iter = 0;
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};
// For sampling: builds the GPT from a checkpoint file (or a directory's newest) alone. Throws
// for a --data synthetic checkpoint: it has no byte vocabulary to encode or decode text.
LoadedModel load_model(const std::string& file_or_dir, Device device);

}  // namespace gpt
