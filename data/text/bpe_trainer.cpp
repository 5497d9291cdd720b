// Byte-level BPE training (data/text/bpe_trainer.h): unique pre-tokenized pieces with their
// counts, adjacent-pair counts kept up to date as merges rewrite the pieces that hold them, and
// a lazy max-heap picking the most frequent pair.
#include "data/text/bpe_trainer.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "data/text/pretokenize.h"
#include "tensor/error.h"

namespace minidl::data::text {
namespace {

using PairKey = uint64_t;
PairKey key_of(int32_t a, int32_t b) {
  return uint64_t(uint32_t(a)) << 32 | uint32_t(b);
}
int32_t first_of(PairKey k) {
  return int32_t(k >> 32);
}
int32_t second_of(PairKey k) {
  return int32_t(k & 0xFFFFFFFFu);
}

// GPT-2's byte ids: the printable bytes in ascending order, then the others.
std::vector<uint8_t> gpt2_byte_order() {
  std::vector<uint8_t> order;
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  };
  for (int b = 0; b < 256; ++b)
    if (printable(b)) order.push_back(uint8_t(b));
  for (int b = 0; b < 256; ++b)
    if (!printable(b)) order.push_back(uint8_t(b));
  return order;
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

}  // namespace

BPETokenizer train_bpe(std::string_view corpus, const BPETrainerOptions& options) {
  const int64_t specials = int64_t(options.special_tokens.size());
  MINIDL_CHECK(options.vocab_size >= 256 + specials, "train_bpe: vocab_size ", options.vocab_size,
               " is below the 256 bytes plus ", specials, " special token(s)");
  std::vector<std::string> tokens;  // id -> bytes
  std::unordered_map<std::string, int32_t> token_id;
  for (uint8_t b : gpt2_byte_order()) {
    token_id.emplace(std::string(1, char(b)), int32_t(tokens.size()));
    tokens.emplace_back(1, char(b));
  }
  // The unique pieces and how often each occurs.
  std::unordered_map<std::string_view, int64_t> piece_counts;
  for (std::string_view p : gpt2_pretokenize(corpus)) ++piece_counts[p];
  std::vector<Word> words;
  words.reserve(piece_counts.size());
  for (const auto& [p, n] : piece_counts) {
    Word w{{}, n};
    for (char c : p) w.symbols.push_back(token_id.at(std::string(1, c)));
    words.push_back(std::move(w));
  }
  std::unordered_map<PairKey, int64_t> pair_count;
  std::unordered_map<PairKey, std::vector<int32_t>> pair_words;  // may list a word twice
  auto add_pairs = [&](int32_t wi, int64_t sign, std::unordered_set<PairKey>* changed) {
    const Word& w = words[size_t(wi)];
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const PairKey k = key_of(w.symbols[i], w.symbols[i + 1]);
      pair_count[k] += sign * w.count;
      if (sign > 0) pair_words[k].push_back(wi);
      if (changed) changed->insert(k);
    }
  };
  for (int32_t wi = 0; wi < int32_t(words.size()); ++wi) add_pairs(wi, +1, nullptr);
  // The most frequent pair; ties to the larger (first token, second token) by bytes.
  auto less = [&](const std::pair<int64_t, PairKey>& x, const std::pair<int64_t, PairKey>& y) {
    if (x.first != y.first) return x.first < y.first;
    const std::string &xa = tokens[size_t(first_of(x.second))],
                      &ya = tokens[size_t(first_of(y.second))];
    if (xa != ya) return xa < ya;
    return tokens[size_t(second_of(x.second))] < tokens[size_t(second_of(y.second))];
  };
  std::priority_queue<std::pair<int64_t, PairKey>, std::vector<std::pair<int64_t, PairKey>>,
                      decltype(less)>
      heap(less);
  for (const auto& [k, n] : pair_count)
    if (n > 0) heap.emplace(n, k);
  std::vector<std::pair<std::string, std::string>> merges;
  const int64_t target = options.vocab_size - specials;
  std::vector<int32_t> stamp(words.size(), -1);
  while (int64_t(tokens.size()) < target && !heap.empty()) {
    const auto [n, k] = heap.top();
    heap.pop();
    auto it = pair_count.find(k);
    if (it == pair_count.end() || it->second != n || n <= 0) continue;  // stale
    const int32_t a = first_of(k), b = second_of(k);
    const std::string merged = tokens[size_t(a)] + tokens[size_t(b)];
    merges.emplace_back(tokens[size_t(a)], tokens[size_t(b)]);
    auto [tid, fresh] = token_id.try_emplace(merged, int32_t(tokens.size()));
    if (fresh) tokens.push_back(merged);
    const int32_t t = tid->second;
    std::unordered_set<PairKey> changed;
    const std::vector<int32_t> holders = std::move(pair_words[k]);
    pair_words.erase(k);
    const int32_t round = int32_t(merges.size());
    for (int32_t wi : holders) {
      if (stamp[size_t(wi)] == round) continue;
      stamp[size_t(wi)] = round;
      Word& w = words[size_t(wi)];
      bool has = false;
      for (size_t i = 0; i + 1 < w.symbols.size() && !has; ++i)
        has = w.symbols[i] == a && w.symbols[i + 1] == b;
      if (!has) continue;
      add_pairs(wi, -1, &changed);
      std::vector<int32_t> out;
      for (size_t i = 0; i < w.symbols.size();) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(t);
          i += 2;
        } else {
          out.push_back(w.symbols[i++]);
        }
      }
      w.symbols = std::move(out);
      add_pairs(wi, +1, &changed);
    }
    for (PairKey c : changed) {
      auto pc = pair_count.find(c);
      if (pc != pair_count.end() && pc->second > 0) heap.emplace(pc->second, c);
    }
  }
  std::unordered_map<std::string, int64_t> vocab;
  for (size_t id = 0; id < tokens.size(); ++id) vocab.emplace(tokens[id], int64_t(id));
  for (const std::string& s : options.special_tokens) {
    MINIDL_CHECK(!vocab.count(s), "train_bpe: special token '", s, "' is also a learned token");
    vocab.emplace(s, int64_t(vocab.size()));
  }
  return BPETokenizer(std::move(vocab), std::move(merges), options.special_tokens);
}

}  // namespace minidl::data::text
