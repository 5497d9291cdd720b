// GPT-2's pre-tokenization: the text split by the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with a hand-written scanner (no regex library), on UTF-8 bytes. A byte that is not part of a
// valid UTF-8 sequence counts as one character of none of the classes (as Python's
// surrogateescape decoding makes it), so any byte string splits, and the pieces concatenate
// back to it.
#pragma once
#include <string_view>
#include <vector>

namespace minidl::data::text {

// The pieces, in order, as views into `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace minidl::data::text
