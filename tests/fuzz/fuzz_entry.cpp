// The libFuzzer entry point of one fuzz binary: MINIDL_FUZZ_TARGET names the target body
// (fuzz_targets.h), set per executable by tests/fuzz/CMakeLists.txt.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::MINIDL_FUZZ_TARGET(data, size);
}
