// Learning GPT-2-style byte-level BPE merges on a corpus (Hugging Face's BpeTrainer / GPT-2's
// procedure): the corpus pre-tokenized by GPT-2's pattern, then the most frequent adjacent pair
// merged, again and again, until the vocabulary has the size asked for.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/text/bpe_tokenizer.h"

namespace minidl::data::text {

struct BPETrainerOptions {
  int64_t vocab_size = 50257;  // 256 bytes + merges + special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>"};  // the last ids
};

// Ids: the 256 bytes in GPT-2's order (ids 0..255 as GPT-2's vocab.json has them), then one per
// merge result, then the special tokens. Ties between equally frequent pairs go to the larger
// pair by bytes (first token, then second), so a run is deterministic.
BPETokenizer train_bpe(std::string_view corpus, const BPETrainerOptions& options = {});

}  // namespace minidl::data::text
