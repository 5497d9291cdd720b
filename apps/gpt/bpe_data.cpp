// BPE token data for gpt --tokenizer (apps/gpt/bpe_data.h).
#include "apps/gpt/bpe_data.h"

#include <fstream>
#include <sstream>

#include "data/text/token_shard.h"

namespace gpt {

BPETextDataset::BPETextDataset(const std::string& path, const std::string& tokenizer_dir,
                               int64_t block_size, double train_fraction)
    : path_(path), tokenizer_dir_(tokenizer_dir), block_size_(block_size) {
  tokenizer_ = std::make_shared<data::text::BPETokenizer>(
      data::text::BPETokenizer::from_directory(tokenizer_dir));
  std::vector<int64_t> ids;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0) {
    ids = data::text::read_token_shard(path, tokenizer_->vocab_size());
  } else {
    std::ifstream in(path, std::ios::binary);
    MINIDL_CHECK(in.good(), "cannot open the text file '", path, "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    ids = tokenizer_->encode(ss.str());
  }
  const auto n_train = int64_t(double(ids.size()) * train_fraction);
  train_.assign(ids.begin(), ids.begin() + n_train);
  val_.assign(ids.begin() + n_train, ids.end());
  MINIDL_CHECK(int64_t(val_.size()) > block_size && int64_t(train_.size()) > block_size, "'", path,
               "' has ", ids.size(), " tokens: too short for block_size ", block_size,
               " (each split needs more than block_size tokens)");
}

Batch BPETextDataset::get_batch(const std::string& split, int64_t batch, Generator& gen) const {
  MINIDL_CHECK(split == "train" || split == "val", "split must be train or val, got ", split);
  return random_windows(split == "train" ? train_ : val_, block_size_, batch, gen);
}

std::string BPETextDataset::describe() const {
  return path_ + ", " + std::to_string(train_.size() + val_.size()) + " BPE tokens (" +
         std::to_string(train_.size()) + " train / " + std::to_string(val_.size()) +
         " val), vocab " + std::to_string(tokenizer_->vocab_size()) + " (" + tokenizer_dir_ + ")";
}

}  // namespace gpt
