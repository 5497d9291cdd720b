// GPT-2's pre-tokenization scanner (data/text/pretokenize.h): decodes UTF-8 one character at a
// time and tries the pattern's alternatives in order, as the regex engine would.
#include "data/text/pretokenize.h"

#include <cstdint>

#include "data/text/unicode_classes.h"

namespace minidl::data::text {
namespace {

enum class Kind { letter, number, space, other };

struct Char {
  Kind kind;
  size_t len;  // bytes
};

// The character at `at` (strict UTF-8: shortest form, no surrogates, <= U+10FFFF; anything else
// is one byte of kind other).
Char char_at(std::string_view s, size_t at) {
  const auto b = [&](size_t i) { return uint8_t(s[at + i]); };
  const uint8_t c = b(0);
  char32_t cp = 0;
  size_t len = 1;
  if (c < 0x80) {
    cp = c;
  } else {
    const auto cont = [&](size_t i) { return at + i < s.size() && (b(i) & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF && cont(1)) {
      cp = char32_t(c & 0x1F) << 6 | (b(1) & 0x3F), len = 2;
    } else if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
      cp = char32_t(c & 0x0F) << 12 | char32_t(b(1) & 0x3F) << 6 | (b(2) & 0x3F), len = 3;
      if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return {Kind::other, 1};
    } else if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
      cp = char32_t(c & 0x07) << 18 | char32_t(b(1) & 0x3F) << 12 | char32_t(b(2) & 0x3F) << 6 |
           (b(3) & 0x3F);
      len = 4;
      if (cp < 0x10000 || cp > 0x10FFFF) return {Kind::other, 1};
    } else {
      return {Kind::other, 1};
    }
  }
  if (cp < 0x80) {  // the common case without a table search
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return {Kind::letter, 1};
    if (cp >= '0' && cp <= '9') return {Kind::number, 1};
    if (cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1C && cp <= 0x1F))
      return {is_space(cp) ? Kind::space : Kind::other, 1};
    return {Kind::other, 1};
  }
  if (is_letter(cp)) return {Kind::letter, len};
  if (is_number(cp)) return {Kind::number, len};
  if (is_space(cp)) return {Kind::space, len};
  return {Kind::other, len};
}

// The length of the contraction at `at` ('s 't 're 've 'm 'll 'd), or 0.
size_t contraction(std::string_view s, size_t at) {
  if (s[at] != '\'' || at + 1 >= s.size()) return 0;
  const char a = s[at + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const char b = at + 2 < s.size() ? s[at + 2] : '\0';
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The end of the run of characters of `kind` starting at `at`.
size_t run_end(std::string_view s, size_t at, Kind kind) {
  while (at < s.size()) {
    const Char c = char_at(s, at);
    if (c.kind != kind) break;
    at += c.len;
  }
  return at;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view s) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t end = at;
    if (const size_t n = contraction(s, at)) {
      end = at + n;
    } else {
      const Char c = char_at(s, at);
      // " ?X+" for X = letters, numbers, others: an optional leading space, then a run.
      Kind run_kind = c.kind;
      size_t run_from = at + c.len;
      if (s[at] == ' ' && at + 1 < s.size()) {
        const Char next = char_at(s, at + 1);
        if (next.kind != Kind::space) run_kind = next.kind, run_from = at + 1 + next.len;
      }
      if (run_kind != Kind::space) {
        end = run_end(s, run_from, run_kind);
      } else {
        // \s+(?!\S): the run of spaces, less its last character when a non-space follows
        // (that one starts the next piece, " word"); \s+ when that leaves nothing.
        const size_t stop = run_end(s, at, Kind::space);
        end = stop;
        if (stop < s.size()) {
          size_t last = at;  // the start of the run's last character
          for (size_t i = at; i < stop; i += char_at(s, i).len) last = i;
          if (last > at) end = last;
        }
      }
    }
    out.push_back(s.substr(at, end - at));
    at = end;
  }
  return out;
}

}  // namespace minidl::data::text
