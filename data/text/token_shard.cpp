// nanoGPT-style token shards (data/text/token_shard.h): raw little-endian uint16/uint32 ids.
#include "data/text/token_shard.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tensor/error.h"

namespace minidl::data::text {

int token_width(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

void write_token_shard(const std::string& path, const std::vector<int64_t>& ids,
                       int64_t vocab_size) {
  const int width = token_width(vocab_size);
  std::vector<unsigned char> bytes(ids.size() * size_t(width));
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    MINIDL_CHECK(id >= 0 && id < vocab_size, "write_token_shard: id ", id, " at position ", i,
                 " is outside the vocabulary [0, ", vocab_size, ")");
    for (int b = 0; b < width; ++b) bytes[i * size_t(width) + size_t(b)] = uint8_t(id >> (8 * b));
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
  MINIDL_CHECK(bytes.size() % size_t(width) == 0, "read_token_shard: '", path, "' has ",
               bytes.size(), " bytes, not a multiple of ", width, " (uint", 8 * width,
               " ids for a vocabulary of ", vocab_size, ")");
  std::vector<int64_t> ids(bytes.size() / size_t(width));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = 0;
    for (int b = 0; b < width; ++b) id |= int64_t(bytes[i * size_t(width) + size_t(b)]) << (8 * b);
    MINIDL_CHECK(id < vocab_size, "read_token_shard: '", path, "' holds id ", id, " at position ",
                 i, ", outside the vocabulary [0, ", vocab_size, ")");
    ids[i] = id;
  }
  return ids;
}

}  // namespace minidl::data::text
