// Runtime skips for doctest cases: MINIDL_SKIP("reason") reports the running case as skipped
// (tests/main.cpp prints each with its reason and counts them; a run whose every case skipped
// exits 77, ctest's skip code) and returns from the case.
#pragma once
#include <string>

namespace testutil {
// Records the running case as skipped with `reason` (once per case); prints it at once.
void report_skip(const std::string& reason);
// The reason for the stand-in cases of suites compiled out without Gloo.
inline constexpr const char* kNoGloo =
    "minidl was built without Gloo (libgloo-dev not found at configure time): the multi-process "
    "cases of this file are compiled out";
}  // namespace testutil

#define MINIDL_SKIP(reason)          \
  do {                               \
    ::testutil::report_skip(reason); \
    return;                          \
  } while (false)
