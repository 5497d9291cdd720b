// Without a usable GPU, CUDA requests say so in PyTorch's words ("CUDA is not available on
// this machine ..."), not with a raw runtime error code and a source path.
#include <doctest/doctest.h>

#include "tensor/cuda_api.h"
#include "tensor/pinned.h"
#include "test_util.h"

using namespace minidl;

TEST_CASE("no GPU: .to(cuda), device queries and pinned memory explain why") {
  if (cuda::is_available()) {
    CHECK(cuda::unavailable_reason().empty());  // a GPU machine: nothing to explain
    return;
  }
  const std::string reason = cuda::unavailable_reason();
  CAPTURE(reason);
  if (cuda::is_built()) {
    CHECK(reason.rfind("CUDA is not available on this machine (", 0) == 0);
  } else {
    CHECK(reason.find("built without CUDA") != std::string::npos);
  }
  auto message_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Device gpu(DeviceType::cuda, 0);
  for (const std::string& m :
       {message_of([&] { ones({2}).to(gpu); }), message_of([] { cuda::current_device(); }),
        message_of([] { cuda::set_device(0); }), message_of([] { cuda::synchronize(); }),
        message_of([] { empty_pinned({4}, kFloat32); })}) {
    CAPTURE(m);
    CHECK(m.find(cuda::is_built() ? "CUDA is not available on this machine" : "without CUDA") !=
          std::string::npos);
    CHECK(m.find("CUDA error:") == std::string::npos);
    CHECK(m.find(".cu:") == std::string::npos);  // no source path of minidl's
  }
}
