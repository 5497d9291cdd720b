// Warnings (Python's warnings.warn): one line "[minidl] warning: ..." on stderr, a once-per-key
// variant for call sites that run every step, and a capture scope for tests and tools.
#pragma once
#include <string>
#include <vector>
#include <version>
#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace minidl {

// The caller's file and line, as std::source_location. Where the standard library lacks it
// (clang 14 with libstdc++ 12 has no __builtin_source_location), the same interface is built on
// __builtin_FILE / __builtin_LINE, which gcc and clang evaluate at the outermost call site of a
// defaulted argument too.
#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          const char* function = __builtin_FUNCTION(),
                                          unsigned line = __builtin_LINE()) noexcept {
    SourceLocation where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};
#endif

// Prints "[minidl] warning: <text>" on stderr, or records it while a WarningCapture is active.
void warn(const std::string& text);
// warn(text) the first time `key` is seen in this process; later calls with the same key are
// silent. Returns whether it warned.
bool warn_once(const std::string& key, const std::string& text);
// A key naming a caller's source line ("file.cpp:42"), for warn_once per call site.
std::string call_site_key(const SourceLocation& where);

// torch's warnings.catch_warnings(record=True): while alive, warnings from any thread are
// collected here instead of printed (the innermost capture gets them). Not copyable.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  std::vector<std::string> messages() const;  // the texts, without the "[minidl] warning: "
  // Whether any captured message contains `text`.
  bool contains(const std::string& text) const;

 private:
  friend void warn(const std::string& text);
  WarningCapture* outer_ = nullptr;
  std::vector<std::string> messages_;
};

}  // namespace minidl
