// Token shards as nanoGPT writes them (train.bin / val.bin): the ids back to back, little-endian
// uint16 when the vocabulary fits in 65,536 ids, else uint32; no header (the vocabulary size
// decides the width on both sides). Or llm.c's: the same ids after a 256-int32 header (magic
// 20240520 / version 1 for uint16, 20240801 / version 7 for uint32, then the token count).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::data::text {

// Bytes per id for a vocabulary of `vocab_size` ids: 2 up to 65,536, else 4.
int token_width(int64_t vocab_size);
// Writes atomically (a temporary file renamed into place); ids must lie in [0, vocab_size).
enum class ShardFormat { nanogpt, llmc };
void write_token_shard(const std::string& path, const std::vector<int64_t>& ids, int64_t vocab_size,
                       ShardFormat format = ShardFormat::nanogpt);
// Reads a shard written for `vocab_size` in either format (llm.c's is recognized by its header);
// a size that does not fit the width or the header's count, or an id outside the vocabulary, is
// an error naming the file.
std::vector<int64_t> read_token_shard(const std::string& path, int64_t vocab_size);

}  // namespace minidl::data::text
