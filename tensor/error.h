// Error type and checking macros: every failure is an exception whose message names
// the op, shapes, dtypes or files involved (built by streaming the arguments).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace minidl {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace minidl

// MINIDL_CHECK(cond, "op `add`: shapes ", a, " and ", b, " do not broadcast")
#define MINIDL_CHECK(cond, ...)                                     \
  do {                                                              \
    if (!(cond)) [[unlikely]]                                       \
      throw ::minidl::Error(::minidl::detail::concat(__VA_ARGS__)); \
  } while (0)

#define MINIDL_FAIL(...) throw ::minidl::Error(::minidl::detail::concat(__VA_ARGS__))
