// The apps' start-of-run note for shared machines: with other work on the cores, libgomp's
// default spin-waiting threads slow every step several-fold; OMP_WAIT_POLICY=passive avoids it.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace minidl::apps {

// The note, or "" when it does not apply: this process runs `threads` > 1 OpenMP threads,
// OMP_WAIT_POLICY is unset (`wait_policy` null) and the 1-minute load average `load` is at
// least the `cpus` online (other jobs share the cores).
inline std::string shared_cores_note(int threads, double load, int cpus, const char* wait_policy) {
  if (threads <= 1 || wait_policy != nullptr || cpus <= 0 || load < double(cpus)) return "";
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "note: the load average (%.1f) is at least this machine's %d CPUs: other work "
                "shares the cores, and spinning OpenMP threads (%d per process) can slow each "
                "step several-fold; set OMP_WAIT_POLICY=passive, or --threads 1",
                load, cpus, threads);
  return buf;
}

// The same for this machine now (getloadavg, online CPUs, the environment).
inline std::string shared_cores_note(int threads) {
  double load[1] = {0};
  if (getloadavg(load, 1) != 1) return "";
  return shared_cores_note(threads, load[0], int(sysconf(_SC_NPROCESSORS_ONLN)),
                           std::getenv("OMP_WAIT_POLICY"));
}

}  // namespace minidl::apps
