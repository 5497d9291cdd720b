// The character classes of GPT-2's pre-tokenization pattern, exactly as the `regex` module GPT-2's
// encoder uses defines them (generated tables: tools/golden/gen_unicode_classes.py).
#pragma once

namespace minidl::data::text {

bool is_letter(char32_t c);  // \p{L}
bool is_number(char32_t c);  // \p{N}
bool is_space(char32_t c);   // \s

}  // namespace minidl::data::text
