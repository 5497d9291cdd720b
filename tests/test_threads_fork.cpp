// A child forked (without exec) after OpenMP's threads started: GNU libgomp's pool does not
// survive fork(), so a team started there would wait forever. minidl runs that child's kernels
// on one thread (and set_num_threads keeps it at one, with a warning) instead of hanging.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "skip.h"
#include "test_util.h"

using namespace minidl;

namespace {

// Restores the thread count when the case ends.
struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

// The child's checks, as an exit code (doctest's macros do not cross fork()): 0 all passed,
// 1 a kernel result was wrong, 2 the thread count was not 1, 3 set_num_threads raised it.
int child_checks(const Tensor& x) {
  alarm(30);                             // a hang ends as SIGALRM, which the parent reports
  const Tensor y = add(mul(x, 3.0), x);  // elementwise over 2^20: parallel_for's team size
  const Tensor s = sum(y);
  if (y.at({12345}) != 4.0 * 0.5 || s.item<double>() != 4.0 * 0.5 * double(x.numel())) return 1;
  if (get_num_threads() != 1) return 2;
  set_num_threads(2);
  if (get_num_threads() != 1) return 3;
  const Tensor z = matmul(full({256, 256}, 1.0, kFloat32), full({256, 256}, 2.0, kFloat32));
  if (z.at({7, 9}) != 512.0) return 1;
  return 0;
}

}  // namespace

TEST_CASE("threads: a child forked after OpenMP's threads started runs on one thread, no hang") {
  const ThreadCount restore;
  set_num_threads(2);
  if (get_num_threads() < 2) MINIDL_SKIP("built without OpenMP: one CPU thread");
  const Tensor x = full({1 << 20}, 0.5, kFloat32);
  CHECK(sum(add(x, x)).item<double>() == double(x.numel()));  // a team of 2 starts here
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(child_checks(x));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const std::string how = WIFSIGNALED(status)
                              ? "killed by signal " + std::to_string(WTERMSIG(status))
                              : "exited with " + std::to_string(WEXITSTATUS(status));
  INFO("child ", how, " (SIGALRM: its kernels hung; 1: wrong result; 2, 3: thread count not 1)");
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // The parent keeps its threads.
  CHECK(get_num_threads() == 2);
  CHECK(sum(add(x, x)).item<double>() == double(x.numel()));
}
