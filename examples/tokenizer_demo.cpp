// The guide's "Text and tokenizers" (docs/guide.md): learn GPT-2-style byte-level BPE on a text
// file, save it in GPT-2's format, load it back (as one loads GPT-2's own vocab.json +
// merges.txt), encode, decode, and write a nanoGPT token shard.
// Usage: tokenizer_demo TEXT_FILE [OUT_DIR]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "data/text/bpe_tokenizer.h"
#include "data/text/bpe_trainer.h"
#include "data/text/token_shard.h"

using namespace minidl::data::text;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TEXT_FILE [OUT_DIR]\n", argv[0]);
    return 2;
  }
  const std::string dir = argc > 2 ? argv[2] : "tokenizer_demo";
  std::ifstream file(argv[1], std::ios::binary);
  std::ostringstream ss;
  ss << file.rdbuf();
  const std::string text = ss.str().substr(0, 300000);
  // [snippet:tokenizer]
  // GPT-2-style byte-level BPE: 256 bytes + merges + <|endoftext|> (GPT-2 itself: 50257).
  BPETokenizer learned = train_bpe(text, {.vocab_size = 2048});
  learned.save(dir);  // vocab.json + merges.txt, GPT-2's (and Hugging Face's) format
  BPETokenizer tok = BPETokenizer::from_directory(dir);  // or a directory with GPT-2's files

  std::vector<int64_t> ids = tok.encode("Call me Ishmael.<|endoftext|>It's 2026 \xF0\x9F\x90\x8B");
  std::string back = tok.decode(ids);  // exactly the input bytes, for any input
  write_token_shard(dir + "/train.bin", tok.encode(text), tok.vocab_size());  // nanoGPT's uint16
  // [/snippet]
  std::printf("%lld tokens; %zu ids: ", (long long)tok.vocab_size(), ids.size());
  for (int64_t id : ids) std::printf("%lld ", (long long)id);
  std::printf("\n");
  const bool ok = back == "Call me Ishmael.<|endoftext|>It's 2026 \xF0\x9F\x90\x8B" &&
                  std::count(ids.begin(), ids.end(), tok.eot_token()) == 1 &&
                  read_token_shard(dir + "/train.bin", tok.vocab_size()) == tok.encode(text);
  std::printf("tokenizer_demo: %s\n", ok ? "decode(encode(x)) == x, shard read back" : "FAILED");
  return ok ? 0 : 1;
}
