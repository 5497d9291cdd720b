// The apps' shared helpers that need no app to run: the shared-machine note (load average at
// least the CPUs, several OpenMP threads, OMP_WAIT_POLICY unset) and when it stays silent.
#include <doctest/doctest.h>

#include <string>

#include "apps/common/shared_cores.h"

using minidl::apps::shared_cores_note;

TEST_CASE("apps: the shared-cores note names the load, the CPUs and OMP_WAIT_POLICY") {
  const std::string note = shared_cores_note(2, 3.4, 2, nullptr);
  CHECK(note.find("load average (3.4)") != std::string::npos);
  CHECK(note.find("2 CPUs") != std::string::npos);
  CHECK(note.find("OMP_WAIT_POLICY=passive") != std::string::npos);
  CHECK(!shared_cores_note(8, 16.0, 16, nullptr).empty());  // load == CPUs: shared
}

TEST_CASE("apps: the shared-cores note is silent when it does not apply") {
  CHECK(shared_cores_note(1, 9.0, 2, nullptr).empty());    // one thread: nothing spins
  CHECK(shared_cores_note(2, 9.0, 2, "passive").empty());  // the user chose a policy
  CHECK(shared_cores_note(2, 1.2, 2, nullptr).empty());    // cores not oversubscribed
  CHECK(shared_cores_note(2, 9.0, 0, nullptr).empty());    // CPU count unknown
  CHECK(shared_cores_note(4).size() < 400);                // this machine: any answer
}
