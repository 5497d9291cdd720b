// Token shards as nanoGPT writes them (train.bin / val.bin): the ids back to back, little-endian
// uint16 when the vocabulary fits in 65,536 ids, else uint32; no header (the vocabulary size
// decides the width on both sides).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::data::text {

// Bytes per id for a vocabulary of `vocab_size` ids: 2 up to 65,536, else 4.
int token_width(int64_t vocab_size);
// Writes atomically (a temporary file renamed into place); ids must lie in [0, vocab_size).
void write_token_shard(const std::string& path, const std::vector<int64_t>& ids,
                       int64_t vocab_size);
// Reads a shard written for `vocab_size`; a size that is not a multiple of the width, or an id
// outside the vocabulary, is an error naming the file.
std::vector<int64_t> read_token_shard(const std::string& path, int64_t vocab_size);

}  // namespace minidl::data::text
