// GPT-2's byte-level BPE (data/text/bpe_tokenizer.h): the byte table, merges by rank on each
// pre-tokenized piece (cached), special tokens, and GPT-2's vocab.json / merges.txt files.
#include "data/text/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/text/pretokenize.h"
#include "tensor/error.h"

namespace minidl::data::text {
namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)),
        s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode(): '!'..'~', '¡'..'¬', '®'..'ÿ' as themselves, the rest from U+0100.
const std::array<std::string, 256>& byte_table() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[size_t(b)] = utf8(printable ? char32_t(b) : char32_t(256 + next++));
    }
    return t;
  }();
  return table;
}

// The raw bytes of a token spelled with the byte table; throws naming `where` otherwise.
std::string unicode_to_bytes(const std::string& spelled, const std::string& where) {
  static const std::unordered_map<std::string, char> back = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m[byte_table()[size_t(b)]] = char(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < spelled.size();) {
    const uint8_t c = uint8_t(spelled[i]);
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : 3;
    auto it = back.find(spelled.substr(i, n));
    MINIDL_CHECK(it != back.end(), where, ": token '", spelled,
                 "' has a character outside GPT-2's byte table");
    out += it->second;
    i += n;
  }
  return out;
}

// A vocabulary object (tokens spelled with the byte table -> ids); `special` keys stay as text.
std::unordered_map<std::string, int64_t> read_vocab(
    const nlohmann::json& obj, const std::string& where,
    const std::function<bool(const std::string&)>& special) {
  std::unordered_map<std::string, int64_t> vocab;
  for (const auto& [spelled, id] : obj.items()) {
    MINIDL_CHECK(id.is_number_integer(), "tokenizer: ", where, ": token '", spelled, "' maps to ",
                 id.dump(), ", not an integer id");
    vocab[special(spelled) ? spelled : unicode_to_bytes(spelled, where)] = id.get<int64_t>();
  }
  return vocab;
}

// A merge written "a b": its two tokens' bytes; nullopt when it is not two tokens.
std::optional<std::pair<std::string, std::string>> split_merge(const std::string& line,
                                                               const std::string& where) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() ||
      line.find(' ', sp + 1) != std::string::npos)
    return std::nullopt;
  return std::pair{unicode_to_bytes(line.substr(0, sp), where),
                   unicode_to_bytes(line.substr(sp + 1), where)};
}

std::string pair_key(const std::string& a, const std::string& b) {
  std::string k;
  k.reserve(a.size() + b.size() + 1);
  k += a, k += '\0', k += b;
  return k;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MINIDL_CHECK(f.good(), "tokenizer: cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  return byte_table()[b];
}

BPETokenizer::BPETokenizer(std::unordered_map<std::string, int64_t> vocab,
                           std::vector<std::pair<std::string, std::string>> merges,
                           std::vector<std::string> special_tokens)
    : vocab_(std::move(vocab)), merges_(std::move(merges)) {
  int64_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    MINIDL_CHECK(id >= 0, "tokenizer: token '", tok, "' has a negative id ", id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(size_t(max_id + 1), std::string());
  std::vector<bool> seen(size_t(max_id + 1), false);
  for (const auto& [tok, id] : vocab_) {
    MINIDL_CHECK(!seen[size_t(id)], "tokenizer: id ", id, " is given to two tokens ('",
                 id_to_token_[size_t(id)], "' and '", tok, "')");
    seen[size_t(id)] = true;
    id_to_token_[size_t(id)] = tok;
  }
  MINIDL_CHECK(int64_t(vocab_.size()) == max_id + 1, "tokenizer: the ids must be 0..",
               vocab_.size() - 1, " without gaps, but the largest is ", max_id);
  for (int b = 0; b < 256; ++b)
    MINIDL_CHECK(vocab_.count(std::string(1, char(b))), "tokenizer: the vocabulary lacks byte ", b,
                 " ('", byte_to_unicode(uint8_t(b)), "'): a byte-level BPE needs all 256");
  for (size_t r = 0; r < merges_.size(); ++r) {
    const auto& [a, b] = merges_[r];
    MINIDL_CHECK(vocab_.count(a) && vocab_.count(b) && vocab_.count(a + b), "tokenizer: merge ",
                 r + 1, " ('", a, "' + '", b, "') names a token that is not in the vocabulary");
    merge_rank_.try_emplace(pair_key(a, b), int64_t(r));
  }
  for (std::string& s : special_tokens)
    if (vocab_.count(s)) special_tokens_.push_back(std::move(s));
}

BPETokenizer BPETokenizer::from_files(const std::string& vocab_json,
                                      const std::string& merges_txt) {
  return parse(read_file(vocab_json), read_file(merges_txt), "'" + vocab_json + "'",
               "'" + merges_txt + "'");
}

BPETokenizer BPETokenizer::from_strings(const std::string& vocab_text,
                                        const std::string& merges_text, const std::string& where) {
  return parse(vocab_text, merges_text, where + " vocab.json", where + " merges.txt");
}

BPETokenizer BPETokenizer::parse(const std::string& vocab_text, const std::string& merges_text,
                                 const std::string& vocab_json, const std::string& merges_txt) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    MINIDL_FAIL("tokenizer: ", vocab_json, " is not JSON: ", e.what());
  }
  MINIDL_CHECK(j.is_object(), "tokenizer: ", vocab_json,
               " must be a JSON object of token -> id (GPT-2's vocab.json)");
  // Special tokens (<|endoftext|>) are kept as text; the rest are byte-table spellings.
  std::unordered_map<std::string, int64_t> vocab =
      read_vocab(j, vocab_json, [](const std::string& t) {
        return t.size() > 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
      });
  std::istringstream lines(merges_text);
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    auto merge = split_merge(line, merges_txt + " line " + std::to_string(n));
    MINIDL_CHECK(merge, "tokenizer: ", merges_txt, " line ", n,
                 ": expected two tokens 'a b', got '", line, "'");
    merges.push_back(std::move(*merge));
  }
  try {
    return BPETokenizer(std::move(vocab), std::move(merges));
  } catch (const Error& e) {
    MINIDL_FAIL(e.what(), " (", vocab_json, ", ", merges_txt, ")");
  }
}

BPETokenizer BPETokenizer::from_tokenizer_json(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    MINIDL_FAIL("tokenizer: '", path, "' is not JSON: ", e.what());
  }
  const nlohmann::json* model = j.contains("model") ? &j["model"] : nullptr;
  MINIDL_CHECK(model && model->is_object() && model->value("type", "") == "BPE" &&
                   model->contains("vocab") && (*model)["vocab"].is_object() &&
                   model->contains("merges") && (*model)["merges"].is_array(),
               "tokenizer: '", path,
               "' is not a Hugging Face BPE tokenizer.json (needs model.type \"BPE\", "
               "model.vocab and model.merges)");
  std::vector<std::string> specials;
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"])
      if (t.contains("content") && t["content"].is_string())
        specials.push_back(t["content"].get<std::string>());
  auto is_special = [&](const std::string& s) {
    return std::find(specials.begin(), specials.end(), s) != specials.end();
  };
  std::unordered_map<std::string, int64_t> vocab =
      read_vocab((*model)["vocab"], "'" + path + "'", is_special);
  for (const auto& t : j.value("added_tokens", nlohmann::json::array()))
    if (t.contains("content") && t.contains("id") && !vocab.count(t["content"].get<std::string>()))
      vocab[t["content"].get<std::string>()] = t["id"].get<int64_t>();
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t n = 0;
  for (const auto& m : (*model)["merges"]) {
    ++n;
    const std::string where = path + " merge " + std::to_string(n);
    if (m.is_string()) {  // "a b" (tokenizers < 0.20)
      auto merge = split_merge(m.get<std::string>(), where);
      MINIDL_CHECK(merge, "tokenizer: '", path, "' merge ", n, ": expected 'a b', got ", m.dump());
      merges.push_back(std::move(*merge));
    } else {
      MINIDL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "tokenizer: '", path, "' merge ", n, ": expected [\"a\", \"b\"], got ",
                   m.dump());
      merges.emplace_back(unicode_to_bytes(m[0].get<std::string>(), where),
                          unicode_to_bytes(m[1].get<std::string>(), where));
    }
  }
  if (specials.empty()) specials.push_back("<|endoftext|>");
  try {
    return BPETokenizer(std::move(vocab), std::move(merges), std::move(specials));
  } catch (const Error& e) {
    MINIDL_FAIL(e.what(), " (", path, ")");
  }
}

BPETokenizer BPETokenizer::from_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path v = fs::path(dir) / "vocab.json", m = fs::path(dir) / "merges.txt";
  if (fs::exists(v) && fs::exists(m)) return from_files(v.string(), m.string());
  const fs::path tj = fs::path(dir) / "tokenizer.json";
  MINIDL_CHECK(fs::exists(tj), "tokenizer: '", dir,
               "' needs vocab.json and merges.txt (GPT-2's tokenizer files) or tokenizer.json");
  return from_tokenizer_json(tj.string());
}

int64_t BPETokenizer::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& BPETokenizer::id_to_token(int64_t id) const {
  MINIDL_CHECK(id >= 0 && id < int64_t(id_to_token_.size()), "tokenizer: id ", id,
               " is outside the vocabulary [0, ", id_to_token_.size(), ")");
  return id_to_token_[size_t(id)];
}

void BPETokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->ids.find(key);
    if (it != cache_->ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // GPT-2's bpe(): merge the lowest-ranked adjacent pair everywhere, until none is a merge.
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int64_t best = std::numeric_limits<int64_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = merge_rank_.find(pair_key(parts[i], parts[i + 1]));
      if (it != merge_rank_.end() && it->second < best) best = it->second, at = i;
    }
    if (best == std::numeric_limits<int64_t>::max()) break;
    const std::string a = parts[at], b = parts[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < parts.size();) {
      if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
        merged.push_back(a + b);
        i += 2;
      } else {
        merged.push_back(std::move(parts[i]));
        ++i;
      }
    }
    parts = std::move(merged);
  }
  std::vector<int64_t> ids;
  for (const std::string& p : parts) ids.push_back(vocab_.at(p));  // merges' results are checked
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->ids.size() < 1000000) cache_->ids.emplace(key, std::move(ids));
}

void BPETokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>& out) const {
  for (std::string_view piece : gpt2_pretokenize(text)) encode_piece(piece, out);
}

std::vector<int64_t> BPETokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 4 + 1);
  if (!allow_special || special_tokens_.empty()) {
    encode_ordinary(text, out);
    return out;
  }
  size_t at = 0;
  while (at < text.size()) {
    size_t first = std::string_view::npos;  // the earliest special token (the longest there)
    const std::string* which = nullptr;
    for (const std::string& s : special_tokens_) {
      const size_t p = text.find(s, at);
      if (p < first || (p == first && p != std::string_view::npos && s.size() > which->size()))
        first = p, which = &s;
    }
    if (which == nullptr || first == std::string_view::npos) {
      encode_ordinary(text.substr(at), out);
      break;
    }
    encode_ordinary(text.substr(at, first - at), out);
    out.push_back(vocab_.at(*which));
    at = first + which->size();
  }
  return out;
}

std::string BPETokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) out += id_to_token(id);
  return out;
}

namespace {
std::string spell(const std::string& raw) {
  std::string s;
  for (char c : raw) s += byte_to_unicode(uint8_t(c));
  return s;
}
}  // namespace

std::string BPETokenizer::vocab_json() const {
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (size_t id = 0; id < id_to_token_.size(); ++id) {
    const std::string& t = id_to_token_[id];
    const bool special =
        std::find(special_tokens_.begin(), special_tokens_.end(), t) != special_tokens_.end();
    v[special ? t : spell(t)] = int64_t(id);
  }
  return v.dump();
}

std::string BPETokenizer::merges_txt() const {
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) m += spell(a) + ' ' + spell(b) + '\n';
  return m;
}

void BPETokenizer::save(const std::string& dir) const {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "vocab.json") << vocab_json();
  std::ofstream(fs::path(dir) / "merges.txt") << merges_txt();
}

}  // namespace minidl::data::text
