// gpt's text subcommands: `gpt train-tokenizer` learns GPT-2-style byte-level BPE on a file and
// writes vocab.json + merges.txt; `gpt encode` writes a file's token ids as a nanoGPT shard.
#pragma once
#include <cstdint>
#include <string>

namespace gpt {

struct TrainTokenizerOptions {
  std::string data, out;
  int64_t vocab_size = 50257;
  int64_t max_bytes = 0;  // 0: the whole file
};
int run_train_tokenizer(const TrainTokenizerOptions& o);

struct EncodeOptions {
  std::string tokenizer, input, output;
  std::string format = "nanogpt";  // nanogpt (raw ids) | llmc (llm.c's 256-int32 header first)
};
int run_encode(const EncodeOptions& o);

}  // namespace gpt
