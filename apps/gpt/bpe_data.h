// gpt --tokenizer DIR: the text (or a nanoGPT .bin shard of it) as GPT-2-style BPE tokens, the
// first 90% train, the last 10% validate, random windows as for bytes (text_data.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/gpt/text_data.h"

namespace gpt {

class BPETextDataset : public TokenData {
 public:
  // `path`: a text file (encoded here) or a .bin shard `gpt encode` wrote with this tokenizer;
  // `tokenizer_dir`: vocab.json + merges.txt (or tokenizer.json).
  BPETextDataset(const std::string& path, const std::string& tokenizer_dir, int64_t block_size,
                 double train_fraction = 0.9);
  Batch get_batch(const std::string& split, int64_t batch, Generator& gen) const override;
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  const data::text::BPETokenizer* bpe() const override { return tokenizer_.get(); }
  std::string describe() const override;

 private:
  std::string path_, tokenizer_dir_;
  std::shared_ptr<data::text::BPETokenizer> tokenizer_;
  std::vector<int64_t> train_, val_;
  int64_t block_size_;
};

}  // namespace gpt
