// Custom doctest main: excludes suites named cuda* when no GPU is present (reported as
// skipped), reports the cases that skipped at run time (MINIDL_SKIP, tests/skip.h) with their
// reasons, and exits 77 (ctest's skip code) when every selected case was skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "skip.h"
#include "tensor/device.h"

namespace {
int g_cases_started = 0;
std::string g_current_case;
std::vector<std::pair<std::string, std::string>> g_skipped;  // (case, reason)

struct CountingListener : doctest::IReporter {
  explicit CountingListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    ++g_cases_started;
    g_current_case = tc.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("minidl_counter", 1, CountingListener);
}  // namespace

void testutil::report_skip(const std::string& reason) {
  // Subcases re-enter a case: report it once.
  if (!g_skipped.empty() && g_skipped.back().first == g_current_case) return;
  g_skipped.emplace_back(g_current_case, reason);
  std::printf("[minidl] SKIPPED \"%s\": %s\n", g_current_case.c_str(), reason.c_str());
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  doctest::Context ctx;
  const bool has_gpu = minidl::device_count(minidl::DeviceType::cuda) > 0;
  // Listing (ctest discovery) shows every case; running skips cuda* suites without a GPU.
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    listing = listing || a.starts_with("--list-test") || a.starts_with("-ltc") ||
              a.starts_with("--dt-list-test") || a.starts_with("-lts");
  }
  if (!has_gpu && !listing) ctx.addFilter("test-suite-exclude", "cuda*");
  ctx.applyCommandLine(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;
  if (!has_gpu) std::printf("[minidl] no CUDA device: suites cuda* skipped\n");
  if (!g_skipped.empty()) {
    std::printf("[minidl] %zu of %d case(s) skipped:\n", g_skipped.size(), g_cases_started);
    for (const auto& [name, reason] : g_skipped)
      std::printf("[minidl]   \"%s\": %s\n", name.c_str(), reason.c_str());
  }
  // Every selected case skipped (none ran: cuda* without a GPU; or each called MINIDL_SKIP).
  const bool all_skipped =
      g_cases_started == 0 ? !has_gpu : size_t(g_cases_started) == g_skipped.size();
  if (rc == 0 && all_skipped) return 77;
  return rc;
}
