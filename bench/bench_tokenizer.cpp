// GPT-2 byte-level BPE throughput (data/text/bpe_tokenizer.h): MB/s of one thread encoding a text
// file, cold (a fresh tokenizer: every piece merged) and warm (the piece cache filled), and the
// pre-tokenizer alone. Usage: bench_tokenizer TOKENIZER_DIR TEXT_FILE [ROUNDS]
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench_common.h"
#include "data/text/bpe_tokenizer.h"
#include "data/text/pretokenize.h"

using namespace minidl::data::text;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::ifstream f(argv[2], std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const double mb = double(text.size()) / 1e6;
  std::vector<double> cold, warm, split;
  size_t n_ids = 0;
  for (int r = 0; r < rounds; ++r) {
    const BPETokenizer tok = BPETokenizer::from_directory(argv[1]);
    double t0 = bench::now_s();
    n_ids = tok.encode(text).size();
    cold.push_back(mb / (bench::now_s() - t0));
    t0 = bench::now_s();
    tok.encode(text);
    warm.push_back(mb / (bench::now_s() - t0));
    t0 = bench::now_s();
    const size_t pieces = gpt2_pretokenize(text).size();
    split.push_back(mb / (bench::now_s() - t0));
    if (pieces == 0 && !text.empty()) return 1;
  }
  std::printf("%s: %.2f MB, %zu ids (%.2f bytes/id), 1 thread, median of %d rounds\n", argv[2], mb,
              n_ids, double(text.size()) / double(n_ids), rounds);
  std::printf("encode cold %.2f MB/s, encode warm %.2f MB/s, pre-tokenize alone %.2f MB/s\n",
              bench::median(cold), bench::median(warm), bench::median(split));
  return 0;
}
