// The gpt app's token data: a text file's bytes (the vocabulary is the sorted set of byte values,
// the first 90% train, the last 10% validate, batches are random windows of block_size + 1 bytes,
// as in nanoGPT) or synthetic uniform tokens (--data synthetic: no tokenizer, no corpus).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/bpe_tokenizer.h"
#include "minidl.h"

namespace gpt {

using namespace minidl;

class ByteVocab {
 public:
  ByteVocab() = default;
  // The sorted distinct bytes of `text` (throws on empty text).
  explicit ByteVocab(const std::string& text);
  // From a stored list of byte values (a checkpoint's vocab tensor); throws on duplicates.
  explicit ByteVocab(const std::vector<uint8_t>& bytes);
  int64_t size() const { return int64_t(itos_.size()); }
  // Throws naming the byte and its position when a byte is not in the vocabulary.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  const std::vector<uint8_t>& bytes() const { return itos_; }
  // [V] uint8 tensor of the byte values, for checkpoints.
  Tensor to_tensor() const;
  static ByteVocab from_tensor(const Tensor& t);

 private:
  std::vector<uint8_t> itos_;
  std::array<int16_t, 256> stoi_{};
};

struct Batch {
  Tensor x, y;  // [B,T] int64 each: y is x shifted by one byte
};

// What the trainer draws its batches from.
class TokenData {
 public:
  virtual ~TokenData() = default;
  // `batch` sequences of block_size inputs and their next-token targets from the split ("train"
  // or "val"), drawn from `gen`.
  virtual Batch get_batch(const std::string& split, int64_t batch, Generator& gen) const = 0;
  // The real vocabulary: every token id is in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The byte vocabulary of a text; nullptr for synthetic tokens (nothing to encode or decode).
  virtual const ByteVocab* byte_vocab() const { return nullptr; }
  // The BPE tokenizer of --tokenizer runs (BPETextDataset); nullptr otherwise.
  virtual const data::text::BPETokenizer* bpe() const { return nullptr; }
  // For the run's first line, e.g. "data.txt, 1276237 bytes (1148613 train / 127624 val), vocab
  // 85".
  virtual std::string describe() const = 0;
};

// `batch` random windows of `data`: x = data[i, i+T), y = data[i+1, i+T+1), i drawn from `gen`.
Batch random_windows(const std::vector<int64_t>& data, int64_t T, int64_t batch, Generator& gen);

class TextDataset : public TokenData {
 public:
  // Reads `path` (throws naming it when missing, unreadable or too short for block_size).
  TextDataset(const std::string& path, int64_t block_size, double train_fraction = 0.9);
  // `batch` random windows of the split ("train" or "val") drawn from `gen`.
  Batch get_batch(const std::string& split, int64_t batch, Generator& gen) const override;
  int64_t vocab_size() const override { return vocab_.size(); }
  const ByteVocab* byte_vocab() const override { return &vocab_; }
  std::string describe() const override;
  const ByteVocab& vocab() const { return vocab_; }
  int64_t train_tokens() const { return int64_t(train_.size()); }
  int64_t val_tokens() const { return int64_t(val_.size()); }
  int64_t file_bytes() const { return file_bytes_; }

 private:
  std::string path_;
  ByteVocab vocab_;
  std::vector<int64_t> train_, val_;
  int64_t block_size_, file_bytes_ = 0;
};

// --data synthetic: every batch is fresh token ids drawn uniformly from [0, vocab_size) by
// `gen` (so a run is deterministic from its seed and resumes bitwise with the RNG state); both
// splits draw the same way. For throughput runs without a tokenizer or corpus; the loss stays
// near ln(vocab_size), as nothing can be learned.
class SyntheticTokens : public TokenData {
 public:
  SyntheticTokens(int64_t vocab_size, int64_t block_size);
  Batch get_batch(const std::string& split, int64_t batch, Generator& gen) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string describe() const override;

 private:
  int64_t vocab_size_, block_size_;
};

}  // namespace gpt
