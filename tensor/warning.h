// Warnings (Python's warnings.warn): one line "[minidl] warning: ..." on stderr, a once-per-key
// variant for call sites that run every step, and a capture scope for tests and tools.
#pragma once
#include <source_location>
#include <string>
#include <vector>

namespace minidl {

// Prints "[minidl] warning: <text>" on stderr, or records it while a WarningCapture is active.
void warn(const std::string& text);
// warn(text) the first time `key` is seen in this process; later calls with the same key are
// silent. Returns whether it warned.
bool warn_once(const std::string& key, const std::string& text);
// A key naming a caller's source line ("file.cpp:42"), for warn_once per call site.
std::string call_site_key(const std::source_location& where);

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
