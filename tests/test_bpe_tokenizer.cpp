// GPT-2's byte-level BPE (data/text/) against a reference GPT-2 encoder in Python
// (tools/golden/gen_gpt2_tokenizer.py, the `regex` module): the pre-tokenized pieces and the ids
// of adversarial texts (contractions, scripts, emoji, CRLF, spaces, digits, invalid UTF-8) with a
// tiny vocabulary in GPT-2's file format; decode(encode(x)) == x on random bytes; save/load round
// trip; bad files fail with one line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/text/bpe_tokenizer.h"
#include "data/text/bpe_trainer.h"
#include "data/text/pretokenize.h"
#include "data/text/token_shard.h"
#include "dist_test_util.h"
#include "golden.h"
#include "minidl.h"

using namespace minidl;
using namespace minidl::data::text;
using namespace testutil;
namespace fs = std::filesystem;

namespace {

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string tiny_dir() {
  return std::string(MINIDL_TEST_DATA_DIR) + "/gpt2_tiny_tokenizer";
}

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("minidl_bpe_" + name + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("GPT-2 pre-tokenization splits like GPT-2's regex, invalid UTF-8 included") {
  const json& g = golden("golden_bpe.json");
  for (const json& c : g["cases"]) {
    const std::string text = from_hex(c["text_hex"]);
    CAPTURE(c["text_hex"].get<std::string>());
    std::vector<std::string> got, want;
    for (std::string_view p : gpt2_pretokenize(text)) got.emplace_back(p);
    for (const json& p : c["pieces_hex"]) want.push_back(from_hex(p));
    CHECK(got == want);
  }
}

TEST_CASE("BPETokenizer: GPT-2's files, ids equal the reference encoder's, decode inverts") {
  const json& g = golden("golden_bpe.json");
  const BPETokenizer tok = BPETokenizer::from_directory(tiny_dir());
  CHECK(tok.vocab_size() == g["vocab_size"].get<int64_t>());
  CHECK(int64_t(tok.merges().size()) == g["merges"].get<int64_t>());
  CHECK(tok.eot_token() == tok.vocab_size() - 1);
  CHECK(byte_to_unicode(' ') == "\xC4\xA0");  // 'Ġ'
  CHECK(byte_to_unicode('a') == "a");
  for (const json& c : g["cases"]) {
    const std::string text = from_hex(c["text_hex"]);
    CAPTURE(c["text_hex"].get<std::string>());
    const std::vector<int64_t> ids = tok.encode(text);
    CHECK(ids == c["ids"].get<std::vector<int64_t>>());
    CHECK(tok.decode(ids) == text);
  }
  // Without special tokens, <|endoftext|> is text.
  const std::vector<int64_t> plain = tok.encode("<|endoftext|>", /*allow_special=*/false);
  CHECK(plain.size() > 1);
  CHECK(tok.decode(plain) == "<|endoftext|>");
}

TEST_CASE("BPETokenizer: decode(encode(x)) == x for random byte strings") {
  const BPETokenizer tok = BPETokenizer::from_directory(tiny_dir());
  std::mt19937 gen(7);
  // Bytes drawn from ASCII, UTF-8 lead and continuation bytes and whole emoji, so that valid and
  // broken sequences mix.
  const std::vector<std::string> alphabet = {"a",
                                             "Z",
                                             " ",
                                             "  ",
                                             "\t",
                                             "\r\n",
                                             "7",
                                             "'s",
                                             "'",
                                             ".",
                                             "\xC3\xA9",
                                             "\xE2\x82",
                                             "\xAC",
                                             "\xF0\x9F\x91\x8D",
                                             "\xFF",
                                             "\xC0",
                                             "\xED\xA0\x80",
                                             "\xE6\x97\xA5"};
  for (int n = 0; n < 300; ++n) {
    std::string s;
    const int len = int(gen() % 24);
    for (int i = 0; i < len; ++i) s += alphabet[gen() % alphabet.size()];
    if (n % 3 == 0)
      for (int i = 0; i < 8; ++i) s += char(gen() % 256);
    CAPTURE(n);
    std::string joined;
    for (std::string_view p : gpt2_pretokenize(s)) {
      CHECK(!p.empty());
      joined += p;
    }
    CHECK(joined == s);
    CHECK(tok.decode(tok.encode(s)) == s);
  }
}

TEST_CASE("BPETokenizer: save writes GPT-2's files that load back to the same ids") {
  const BPETokenizer tok = BPETokenizer::from_directory(tiny_dir());
  const fs::path dir = scratch("save");
  tok.save(dir.string());
  const BPETokenizer back = BPETokenizer::from_directory(dir.string());
  const std::string text = "It's 2026: naïve 👍🏽 tokens\r\n  and <|endoftext|> \xFF!";
  CHECK(back.encode(text) == tok.encode(text));
  CHECK(back.vocab_size() == tok.vocab_size());
  fs::remove_all(dir);
}

TEST_CASE("BPETokenizer: bad files fail with one clear line") {
  const fs::path dir = scratch("bad");
  const std::string vocab = (dir / "vocab.json").string(), merges = (dir / "merges.txt").string();
  fs::copy_file(tiny_dir() + "/vocab.json", vocab);
  std::ofstream(merges) << "#version: 0.2\nĠ t\nzz qq\n";  // zz, qq: not tokens
  std::string e = disttest::expect_error([&] { BPETokenizer::from_files(vocab, merges); }).message;
  CHECK(e.find("merge 2 ('zz' + 'qq') names a token that is not in the vocabulary") !=
        std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
  std::ofstream(merges) << "#version: 0.2\nĠ t x\n";
  e = disttest::expect_error([&] { BPETokenizer::from_files(vocab, merges); }).message;
  CHECK(e.find("line 2: expected two tokens 'a b'") != std::string::npos);
  std::ofstream(vocab) << "{not json";
  e = disttest::expect_error([&] { BPETokenizer::from_files(vocab, merges); }).message;
  CHECK(e.find("vocab.json' is not JSON") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
  e = disttest::expect_error([&] {
        BPETokenizer::from_directory((dir / "missing").string());
      }).message;
  CHECK(e.find("needs vocab.json and merges.txt") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("train_bpe learns the reference trainer's merges, and its tokenizer round-trips") {
  const json& t = golden("golden_bpe.json")["trainer"];
  const std::string corpus = from_hex(t["corpus_hex"]);
  const int64_t n_merges = int64_t(t["merges_hex"].size());
  const BPETokenizer tok = train_bpe(corpus, BPETrainerOptions{.vocab_size = 256 + n_merges + 1});
  REQUIRE(int64_t(tok.merges().size()) == n_merges);
  for (int64_t i = 0; i < n_merges; ++i) {
    CAPTURE(i);
    CHECK(tok.merges()[size_t(i)].first == from_hex(t["merges_hex"][size_t(i)][0]));
    CHECK(tok.merges()[size_t(i)].second == from_hex(t["merges_hex"][size_t(i)][1]));
  }
  CHECK(tok.vocab_size() == 256 + n_merges + 1);
  CHECK(tok.eot_token() == tok.vocab_size() - 1);
  CHECK(tok.id_to_token(0) == "!");  // GPT-2's byte order
  CHECK(tok.decode(tok.encode(corpus)) == corpus);
  CHECK(tok.encode(corpus).size() < corpus.size() * 3 / 4);  // fewer ids than bytes: merged
  const fs::path dir = scratch("trained");
  tok.save(dir.string());
  const BPETokenizer back = BPETokenizer::from_directory(dir.string());
  CHECK(back.encode(corpus) == tok.encode(corpus));
  fs::remove_all(dir);
  CHECK(disttest::expect_error([&] {
          train_bpe("abc", BPETrainerOptions{.vocab_size = 200});
        }).message.find("vocab_size 200 is below the 256 bytes plus 1 special token(s)") !=
        std::string::npos);
}

TEST_CASE("token shards: uint16 up to 65,536 tokens, uint32 above, bad files named") {
  const fs::path dir = scratch("shard");
  const std::string small = (dir / "a.bin").string(), big = (dir / "b.bin").string();
  write_token_shard(small, {0, 1, 50256, 65535}, 65536);
  CHECK(fs::file_size(small) == 8);
  CHECK(read_token_shard(small, 65536) == std::vector<int64_t>{0, 1, 50256, 65535});
  write_token_shard(big, {70000, 3}, 100000);
  CHECK(fs::file_size(big) == 8);
  CHECK(read_token_shard(big, 100000) == std::vector<int64_t>{70000, 3});
  {  // little-endian on disk, as nanoGPT's np.uint16 files
    std::ifstream f(small, std::ios::binary);
    unsigned char b[6] = {};
    f.read(reinterpret_cast<char*>(b), 6);
    CHECK(b[4] == 0x50);  // 50256 = 0xC450
    CHECK(b[5] == 0xC4);
  }
  CHECK(disttest::expect_error([&] {
          write_token_shard(small, {5, 9}, 8);
        }).message.find("id 9 at position 1 is outside the vocabulary [0, 8)") !=
        std::string::npos);
  CHECK(disttest::expect_error([&] {
          read_token_shard(small, 100);
        }).message.find("holds id 50256 at position 2, outside the vocabulary [0, 100)") !=
        std::string::npos);
  std::ofstream(small, std::ios::binary) << "abc";
  CHECK(disttest::expect_error([&] {
          read_token_shard(small, 50257);
        }).message.find("not a multiple of 2") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("BPETokenizer: Hugging Face's tokenizer.json, merges as 'a b' or [a, b]") {
  const json& g = golden("golden_bpe.json");
  std::ifstream vf(tiny_dir() + "/vocab.json");
  const json vocab = json::parse(vf);
  std::ifstream mf(tiny_dir() + "/merges.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(mf, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  const fs::path dir = scratch("hf");
  for (bool pairs : {false, true}) {
    CAPTURE(pairs);
    json merges = json::array();
    for (const std::string& l : lines) {
      const size_t sp = l.find(' ');
      merges.push_back(pairs ? json::array({l.substr(0, sp), l.substr(sp + 1)}) : json(l));
    }
    const json tj = {
        {"version", "1.0"},
        {"added_tokens",
         json::array(
             {{{"id", vocab["<|endoftext|>"]}, {"content", "<|endoftext|>"}, {"special", true}}})},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    std::ofstream(dir / "tokenizer.json") << tj.dump();
    const BPETokenizer tok = BPETokenizer::from_directory(dir.string());  // no vocab.json here
    for (const json& c : g["cases"]) {
      const std::string text = from_hex(c["text_hex"]);
      CHECK(tok.encode(text) == c["ids"].get<std::vector<int64_t>>());
    }
  }
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  CHECK(disttest::expect_error([&] {
          BPETokenizer::from_directory(dir.string());
        }).message.find("is not a Hugging Face BPE tokenizer.json") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("token shards: llm.c's header (magic, version, count) written and recognized") {
  const fs::path dir = scratch("llmc");
  const std::string path = (dir / "a.bin").string();
  write_token_shard(path, {7, 50256, 3}, 50257, ShardFormat::llmc);
  CHECK(fs::file_size(path) == 1024 + 6);
  {
    std::ifstream f(path, std::ios::binary);
    int32_t h[3] = {};
    f.read(reinterpret_cast<char*>(h), sizeof h);
    CHECK(h[0] == 20240520);  // llm.c's GPT-2 shard magic
    CHECK(h[1] == 1);
    CHECK(h[2] == 3);
  }
  CHECK(read_token_shard(path, 50257) == std::vector<int64_t>{7, 50256, 3});
  write_token_shard(path, {70000}, 128256, ShardFormat::llmc);  // uint32: Llama 3's magic
  CHECK(read_token_shard(path, 128256) == std::vector<int64_t>{70000});
  CHECK(disttest::expect_error([&] {
          read_token_shard(path, 50257);
        }).message.find("llm.c shard of uint32 ids") != std::string::npos);
  fs::remove_all(dir);
}
