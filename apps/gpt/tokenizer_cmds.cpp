// gpt train-tokenizer / gpt encode (apps/gpt/tokenizer_cmds.h): a summary line each.
#include "apps/gpt/tokenizer_cmds.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "data/text/bpe_trainer.h"
#include "data/text/token_shard.h"
#include "tensor/error.h"

namespace gpt {
namespace {

std::string read_text(const std::string& path, int64_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  MINIDL_CHECK(f.good(), "cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (max_bytes > 0 && int64_t(s.size()) > max_bytes) s.resize(size_t(max_bytes));
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_train_tokenizer(const TrainTokenizerOptions& o) {
  using namespace minidl::data::text;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = read_text(o.data, o.max_bytes);
  const BPETokenizer tok = train_bpe(text, BPETrainerOptions{.vocab_size = o.vocab_size});
  tok.save(o.out);
  const size_t ids = tok.encode(text).size();
  std::printf(
      "gpt train-tokenizer: %lld tokens (%zu merges + 256 bytes + <|endoftext|>) learned on %.2f "
      "MB of %s in %.1f s; it encodes that text in %zu ids (%.2f bytes per id); wrote "
      "%s/vocab.json "
      "and merges.txt\n",
      (long long)tok.vocab_size(), tok.merges().size(), double(text.size()) / 1e6, o.data.c_str(),
      seconds_since(t0), ids, double(text.size()) / double(std::max<size_t>(ids, 1)),
      o.out.c_str());
  return 0;
}

int run_encode(const EncodeOptions& o) {
  using namespace minidl::data::text;
  const auto t0 = std::chrono::steady_clock::now();
  const BPETokenizer tok = BPETokenizer::from_directory(o.tokenizer);
  const std::string text = read_text(o.input, 0);
  const std::vector<int64_t> ids = tok.encode(text);
  write_token_shard(o.output, ids, tok.vocab_size(),
                    o.format == "llmc" ? ShardFormat::llmc : ShardFormat::nanogpt);
  const double s = seconds_since(t0);
  std::printf(
      "gpt encode: %zu ids (uint%d, %zu bytes) from %.2f MB of %s in %.2f s (%.1f MB/s); wrote "
      "%s\n",
      ids.size(), 8 * token_width(tok.vocab_size()),
      ids.size() * size_t(token_width(tok.vocab_size())), double(text.size()) / 1e6,
      o.input.c_str(), s, double(text.size()) / 1e6 / std::max(s, 1e-9), o.output.c_str());
  return 0;
}

}  // namespace gpt
