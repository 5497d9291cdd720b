// Byte-level text data for the gpt app: the vocabulary is the sorted set of byte values in the
// file, the first 90% of the bytes train and the last 10% validate, and batches are random
// windows of block_size + 1 bytes (inputs and next-byte targets), as in nanoGPT.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

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

class TextDataset {
 public:
  // Reads `path` (throws naming it when missing, unreadable or too short for block_size).
  TextDataset(const std::string& path, int64_t block_size, double train_fraction = 0.9);
  // `batch` random windows of the split ("train" or "val") drawn from `gen`.
  Batch get_batch(const std::string& split, int64_t batch, Generator& gen) const;
  const ByteVocab& vocab() const { return vocab_; }
  int64_t train_tokens() const { return int64_t(train_.size()); }
  int64_t val_tokens() const { return int64_t(val_.size()); }
  int64_t file_bytes() const { return file_bytes_; }

 private:
  ByteVocab vocab_;
  std::vector<int64_t> train_, val_;
  int64_t block_size_, file_bytes_ = 0;
};

}  // namespace gpt
