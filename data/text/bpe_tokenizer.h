// GPT-2's byte-level BPE tokenizer (Hugging Face's GPT2Tokenizer / tiktoken's "gpt2"): text split
// by GPT-2's pattern (pretokenize.h), each piece's bytes merged by rank, special tokens such as
// <|endoftext|> matched first. Loads GPT-2's vocab.json + merges.txt. encode and decode are exact
// inverses on any byte string (invalid UTF-8 included).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace minidl::data::text {

// GPT-2's byte <-> unicode table: printable bytes map to themselves, the other 68 to U+0100...
// (how vocab.json and merges.txt spell raw bytes). The UTF-8 of byte b's character.
const std::string& byte_to_unicode(uint8_t b);

class BPETokenizer {
 public:
  // vocab: token (as raw bytes) -> id; merges: pairs of tokens (raw bytes), by rank.
  BPETokenizer(std::unordered_map<std::string, int64_t> vocab,
               std::vector<std::pair<std::string, std::string>> merges,
               std::vector<std::string> special_tokens = {"<|endoftext|>"});

  // GPT-2's files: vocab.json ({"token": id}, tokens spelled with byte_to_unicode) and merges.txt
  // (a "#version" line, then "a b" per line, by rank). Errors name the file and line.
  static BPETokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // Hugging Face's tokenizer.json of a byte-level BPE (model.vocab, model.merges as "a b" or
  // ["a", "b"], added_tokens as special tokens).
  static BPETokenizer from_tokenizer_json(const std::string& path);
  // A directory holding vocab.json and merges.txt, or else tokenizer.json.
  static BPETokenizer from_directory(const std::string& dir);

  // Token ids of `text`; special tokens in the text become their ids when `allow_special`
  // (Hugging Face's behaviour), else they are encoded as ordinary text.
  std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const;
  // The bytes of the ids, concatenated (may be invalid UTF-8 when ids cut a character).
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const { return int64_t(id_to_token_.size()); }
  // The id of a token given as raw bytes (a special token as its text); -1 when absent.
  int64_t token_to_id(const std::string& token) const;
  const std::string& id_to_token(int64_t id) const;  // raw bytes
  int64_t eot_token() const { return token_to_id("<|endoftext|>"); }

  // Writes vocab.json and merges.txt in GPT-2's format into `dir` (created if missing).
  void save(const std::string& dir) const;
  // Those two files' contents, and a tokenizer from them (`where` names them in errors): a
  // checkpoint carries its tokenizer this way.
  std::string vocab_json() const;
  std::string merges_txt() const;
  static BPETokenizer from_strings(const std::string& vocab_json, const std::string& merges_txt,
                                   const std::string& where);
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }

 private:
  static BPETokenizer parse(const std::string& vocab_text, const std::string& merges_text,
                            const std::string& vocab_name, const std::string& merges_name);
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int64_t>& out) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<std::pair<std::string, std::string>> merges_;
  std::unordered_map<std::string, int64_t> merge_rank_;  // "a\0b" -> rank (by pair)
  std::vector<std::string> special_tokens_;              // present in the vocabulary
  struct Cache {  // piece -> ids, shared by copies (same vocabulary)
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int64_t>> ids;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace minidl::data::text
