// Byte vocabulary, the 90/10 split and random-window batches, and synthetic uniform tokens
// (text_data.h).
#include "apps/gpt/text_data.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace gpt {

ByteVocab::ByteVocab(const std::string& text) {
  MINIDL_CHECK(!text.empty(), "the text is empty: no vocabulary");
  std::array<bool, 256> seen{};
  for (unsigned char c : text) seen[c] = true;
  std::vector<uint8_t> bytes;
  for (int b = 0; b < 256; ++b)
    if (seen[size_t(b)]) bytes.push_back(uint8_t(b));
  *this = ByteVocab(bytes);
}

ByteVocab::ByteVocab(const std::vector<uint8_t>& bytes) : itos_(bytes) {
  MINIDL_CHECK(!bytes.empty(), "an empty byte vocabulary");
  stoi_.fill(-1);
  for (size_t i = 0; i < bytes.size(); ++i) {
    MINIDL_CHECK(stoi_[bytes[i]] < 0, "byte vocabulary: byte ", int(bytes[i]), " appears twice");
    stoi_[bytes[i]] = int16_t(i);
  }
}

std::vector<int64_t> ByteVocab::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int16_t id = stoi_[static_cast<unsigned char>(text[i])];
    MINIDL_CHECK(id >= 0, "byte ", int(static_cast<unsigned char>(text[i])), " at position ", i,
                 " is not in the model's vocabulary of ", size(), " bytes");
    ids[i] = id;
  }
  return ids;
}

std::string ByteVocab::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (int64_t id : ids) {
    MINIDL_CHECK(id >= 0 && id < size(), "token id ", id, " outside the vocabulary of ", size());
    s.push_back(char(itos_[size_t(id)]));
  }
  return s;
}

Tensor ByteVocab::to_tensor() const {
  Tensor t = zeros({size()}, kUInt8);
  std::copy(itos_.begin(), itos_.end(), t.data_ptr<uint8_t>());
  return t;
}

ByteVocab ByteVocab::from_tensor(const Tensor& t) {
  MINIDL_CHECK(t.dim() == 1 && t.dtype() == kUInt8, "a vocabulary tensor must be [V] uint8, got ",
               t.shape_str(), " ", dtype_name(t.dtype()));
  Tensor c = t.cpu().contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  return ByteVocab(std::vector<uint8_t>(p, p + c.numel()));
}

TextDataset::TextDataset(const std::string& path, int64_t block_size, double train_fraction)
    : path_(path), block_size_(block_size) {
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in.good(), "cannot open the text file '", path,
               "' (tools/fetch-moby-dick.sh fetches the default one)");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  file_bytes_ = int64_t(text.size());
  vocab_ = ByteVocab(text);
  std::vector<int64_t> ids = vocab_.encode(text);
  const auto n_train = int64_t(double(ids.size()) * train_fraction);
  train_.assign(ids.begin(), ids.begin() + n_train);
  val_.assign(ids.begin() + n_train, ids.end());
  MINIDL_CHECK(int64_t(val_.size()) > block_size && int64_t(train_.size()) > block_size, "'", path,
               "' has ", text.size(), " bytes: too short for block_size ", block_size,
               " (each split needs more than block_size bytes)");
}

Batch TextDataset::get_batch(const std::string& split, int64_t batch, Generator& gen) const {
  MINIDL_CHECK(split == "train" || split == "val", "split must be train or val, got ", split);
  return random_windows(split == "train" ? train_ : val_, block_size_, batch, gen);
}

Batch random_windows(const std::vector<int64_t>& data, int64_t T, int64_t batch, Generator& gen) {
  // Window starts in [0, len - T): x = data[i, i+T), y = data[i+1, i+T+1).
  Tensor starts = randint(0, int64_t(data.size()) - T, {batch}, kInt64, kCPU, &gen);
  Tensor x = zeros({batch, T}, kInt64), y = zeros({batch, T}, kInt64);
  const int64_t* s = starts.data_ptr<int64_t>();
  int64_t *px = x.data_ptr<int64_t>(), *py = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    std::copy_n(data.begin() + s[b], T, px + b * T);
    std::copy_n(data.begin() + s[b] + 1, T, py + b * T);
  }
  return {x, y};
}

std::string TextDataset::describe() const {
  return path_ + ", " + std::to_string(file_bytes_) + " bytes (" + std::to_string(train_.size()) +
         " train / " + std::to_string(val_.size()) + " val), vocab " +
         std::to_string(vocab_.size());
}

SyntheticTokens::SyntheticTokens(int64_t vocab_size, int64_t block_size)
    : vocab_size_(vocab_size), block_size_(block_size) {
  MINIDL_CHECK(vocab_size >= 1, "synthetic tokens: the vocabulary size must be >= 1, got ",
               vocab_size);
  MINIDL_CHECK(block_size >= 1, "synthetic tokens: block_size must be >= 1, got ", block_size);
}

Batch SyntheticTokens::get_batch(const std::string& split, int64_t batch, Generator& gen) const {
  MINIDL_CHECK(split == "train" || split == "val", "split must be train or val, got ", split);
  // One [B, T+1] draw: x = ids[:, :T], y = ids[:, 1:], like a window of a random text.
  Tensor ids = randint(0, vocab_size_, {batch, block_size_ + 1}, kInt64, kCPU, &gen);
  return {ids.slice(1, 0, block_size_).contiguous(), ids.slice(1, 1, block_size_ + 1).contiguous()};
}

std::string SyntheticTokens::describe() const {
  return "synthetic uniform tokens in [0, " + std::to_string(vocab_size_) + ")";
}

}  // namespace gpt
