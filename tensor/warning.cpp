// Warnings: stderr lines (one per call, or once per key) and the capture stack that tests use
// to see them; a mutex makes warn() safe from data-loader and communication threads.
#include "tensor/warning.h"

#include <cstdio>
#include <mutex>
#include <unordered_set>

namespace minidl {
namespace {
std::mutex g_mutex;
WarningCapture* g_capture = nullptr;  // innermost active capture
std::unordered_set<std::string>& seen_keys() {
  static std::unordered_set<std::string> keys;
  return keys;
}
}  // namespace

void warn(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_capture != nullptr) {
    g_capture->messages_.push_back(text);
    return;
  }
  std::fprintf(stderr, "[minidl] warning: %s\n", text.c_str());
  std::fflush(stderr);
}

bool warn_once(const std::string& key, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!seen_keys().insert(key).second) return false;
  }
  warn(text);
  return true;
}

std::string call_site_key(const SourceLocation& where) {
  return std::string(where.file_name()) + ":" + std::to_string(where.line()) + ":" +
         std::to_string(where.column());
}

WarningCapture::WarningCapture() {
  std::lock_guard<std::mutex> lock(g_mutex);
  outer_ = g_capture;
  g_capture = this;
}

WarningCapture::~WarningCapture() {
  std::lock_guard<std::mutex> lock(g_mutex);
  // Captures nest as scopes do; one destroyed out of order unlinks itself.
  if (g_capture == this) {
    g_capture = outer_;
    return;
  }
  for (WarningCapture* c = g_capture; c != nullptr; c = c->outer_)
    if (c->outer_ == this) {
      c->outer_ = outer_;
      return;
    }
}

std::vector<std::string> WarningCapture::messages() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return messages_;
}

bool WarningCapture::contains(const std::string& text) const {
  for (const std::string& m : messages())
    if (m.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace minidl
