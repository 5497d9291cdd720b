// nanoGPT-style token shards (data/text/token_shard.h): raw little-endian uint16/uint32 ids.
#include "data/text/token_shard.h"

#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tensor/error.h"

namespace minidl::data::text {

int token_width(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

namespace {
constexpr int32_t kMagic16 = 20240520, kMagic32 = 20240801;  // llm.c's GPT-2 / Llama 3 shards
constexpr size_t kHeaderBytes = 256 * 4;

void put_i32(unsigned char* p, int32_t v) {
  for (int b = 0; b < 4; ++b) p[b] = uint8_t(uint32_t(v) >> (8 * b));
}
int32_t get_i32(const unsigned char* p) {
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= uint32_t(p[b]) << (8 * b);
  return int32_t(v);
}
}  // namespace

void write_token_shard(const std::string& path, const std::vector<int64_t>& ids, int64_t vocab_size,
                       ShardFormat format) {
  const int width = token_width(vocab_size);
  const size_t header = format == ShardFormat::llmc ? kHeaderBytes : 0;
  std::vector<unsigned char> bytes(header + ids.size() * size_t(width));
  if (format == ShardFormat::llmc) {
    MINIDL_CHECK(ids.size() <= size_t(INT32_MAX), "write_token_shard: ", ids.size(),
                 " ids do not fit llm.c's int32 count");
    put_i32(bytes.data(), width == 2 ? kMagic16 : kMagic32);
    put_i32(bytes.data() + 4, width == 2 ? 1 : 7);
    put_i32(bytes.data() + 8, int32_t(ids.size()));
  }
  unsigned char* body = bytes.data() + header;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    MINIDL_CHECK(id >= 0 && id < vocab_size, "write_token_shard: id ", id, " at position ", i,
                 " is outside the vocabulary [0, ", vocab_size, ")");
    for (int b = 0; b < width; ++b) body[i * size_t(width) + size_t(b)] = uint8_t(id >> (8 * b));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MINIDL_CHECK(f.good(), "write_token_shard: cannot write '", tmp, "'");
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    f.flush();
    MINIDL_CHECK(f.good(), "write_token_shard: writing '", tmp, "' failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

std::vector<int64_t> read_token_shard(const std::string& path, int64_t vocab_size) {
  const int width = token_width(vocab_size);
  std::ifstream f(path, std::ios::binary);
  MINIDL_CHECK(f.good(), "read_token_shard: cannot open '", path, "'");
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)),
                                         std::istreambuf_iterator<char>());
  // llm.c's header: its magic and a count that matches the size (a raw nanoGPT file whose first
  // ids happen to spell the magic is still read as raw).
  size_t header = 0;
  if (bytes.size() >= kHeaderBytes) {
    const int32_t magic = get_i32(bytes.data());
    const int64_t count = get_i32(bytes.data() + 8);
    const int file_width = magic == kMagic16 ? 2 : magic == kMagic32 ? 4 : 0;
    if (file_width > 0 && count >= 0 &&
        bytes.size() == kHeaderBytes + size_t(count) * size_t(file_width)) {
      MINIDL_CHECK(file_width == width, "read_token_shard: '", path, "' is an llm.c shard of uint",
                   8 * file_width, " ids, but a vocabulary of ", vocab_size, " needs uint",
                   8 * width);
      header = kHeaderBytes;
    }
  }
  const size_t n_bytes = bytes.size() - header;
  MINIDL_CHECK(n_bytes % size_t(width) == 0, "read_token_shard: '", path, "' has ", n_bytes,
               " bytes, not a multiple of ", width, " (uint", 8 * width,
               " ids for a vocabulary of ", vocab_size, ")");
  const unsigned char* body = bytes.data() + header;
  std::vector<int64_t> ids(n_bytes / size_t(width));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = 0;
    for (int b = 0; b < width; ++b) id |= int64_t(body[i * size_t(width) + size_t(b)]) << (8 * b);
    MINIDL_CHECK(id < vocab_size, "read_token_shard: '", path, "' holds id ", id, " at position ",
                 i, ", outside the vocabulary [0, ", vocab_size, ")");
    ids[i] = id;
  }
  return ids;
}

}  // namespace minidl::data::text
