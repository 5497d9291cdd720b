// The op profiler (tensor/profiler.h): counts per (op, device) while on and nothing while off,
// nested dispatches counted once (towards the outermost op), reset, the table's rows; on a GPU
// (suite cuda_profiler) CUDA ops get device time from their events.
#include <doctest/doctest.h>

#include <string>

#include "tensor/dispatch.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// Turns the profiler on with fresh counts for the scope, and off (counts dropped) after it.
struct ProfilerOn {
  bool previous = profiler::enabled();
  ProfilerOn() {
    profiler::reset();
    profiler::enable(true);
  }
  ~ProfilerOn() {
    profiler::enable(previous);
    profiler::reset();
  }
};

const profiler::OpStats* find(const std::vector<profiler::OpStats>& s, const std::string& op,
                              DeviceType dev) {
  for (const auto& r : s)
    if (r.op == op && r.device == dev) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("profiler: counts dispatches per op while on, none while off") {
  const bool before = profiler::enabled();
  Tensor a = random_tensor({64, 64}, kFloat32, 1), b = random_tensor({64, 64}, kFloat32, 2);
  {
    ProfilerOn on;
    for (int i = 0; i < 5; ++i) (void)(a + b);
    (void)matmul(a, b);
    const auto s = profiler::stats();
    const profiler::OpStats* add = find(s, "add", DeviceType::cpu);
    REQUIRE(add != nullptr);
    CHECK(add->calls == 5);
    CHECK(add->host_ms > 0);
    CHECK(add->device_ms == 0);  // no device timer on the CPU
    CHECK(find(s, "bmm", DeviceType::cpu) != nullptr);
    const std::string t = profiler::table();
    CHECK(t.find("add") != std::string::npos);
    CHECK(t.find("total") != std::string::npos);

    profiler::enable(false);
    (void)(a + b);
    CHECK(find(profiler::stats(), "add", DeviceType::cpu)->calls == 5);
    profiler::reset();
    CHECK(profiler::stats().empty());
  }
  CHECK(profiler::enabled() == before);  // restored (on only under MINIDL_PROFILE=1)
  profiler::enable(false);
  (void)(a + b);
  CHECK(profiler::stats().empty());
  profiler::enable(before);
}

TEST_CASE("profiler: host reads count item(), at() and tolist() while on, nothing else") {
  const bool before = profiler::enabled();
  Tensor a = random_tensor({4, 4}, kFloat32, 3);
  profiler::enable(true);
  const int64_t r0 = profiler::host_read_count();
  Tensor s = sum(a) * 2.0f;  // ops read nothing back
  CHECK(profiler::host_read_count() == r0);
  (void)s.item<double>();
  (void)a.at({1, 2});
  (void)a.tolist<float>();
  CHECK(profiler::host_read_count() == r0 + 3);
  profiler::enable(false);
  (void)s.item<double>();
  CHECK(profiler::host_read_count() == r0 + 3);
  profiler::enable(before);
}

TEST_CASE("profiler: an op dispatched inside another counts towards the outer one only") {
  Tensor a = random_tensor({8}, kFloat32, 3), b = random_tensor({8}, kFloat32, 4);
  ProfilerOn on;
  {
    profiler::detail::Scope outer(Op::bmm, DeviceType::cpu);
    (void)(a * b);  // as a kernel that runs other ops would
  }
  (void)(a - b);
  const auto s = profiler::stats();
  CHECK(find(s, "mul", DeviceType::cpu) == nullptr);
  REQUIRE(find(s, "bmm", DeviceType::cpu) != nullptr);
  CHECK(find(s, "bmm", DeviceType::cpu)->calls == 1);
  REQUIRE(find(s, "sub", DeviceType::cpu) != nullptr);  // depth back to 0 after the scope
  CHECK(find(s, "sub", DeviceType::cpu)->calls == 1);
}

TEST_SUITE("cuda_profiler") {
  TEST_CASE("cuda profiler: CUDA ops get device time, none inside a graph capture") {
    Tensor a = random_tensor({1024, 1024}, kFloat32, 5).to(kCUDA);
    ProfilerOn on;
    for (int i = 0; i < 3; ++i) (void)matmul(a, a);
    const auto s = profiler::stats();
    const profiler::OpStats* mm = find(s, "bmm", DeviceType::cuda);
    REQUIRE(mm != nullptr);
    CHECK(mm->calls == 3);
    CHECK(mm->device_ms > 0);  // 2 GFLOP each: well above the events' resolution

    cuda::CUDAGraph g;
    Tensor out;
    g.capture_begin();
    out = a * 2.0;
    g.capture_end();
    g.replay();
    cuda::synchronize();
    const profiler::OpStats* mul = find(profiler::stats(), "mul", DeviceType::cuda);
    REQUIRE(mul != nullptr);  // counted on the host, not timed on the device
    CHECK(mul->calls == 1);
    CHECK(mul->device_ms == 0);
  }
}
