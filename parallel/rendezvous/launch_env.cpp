// Launcher detection (torchrun, OpenMPI, MPICH / Intel MPI, Slurm job steps) and the parsers for
// Slurm's compressed hostlist and tasks-per-node syntaxes (see launch_env.h for the precedence).
#include "parallel/rendezvous/launch_env.h"

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "tensor/error.h"

namespace minidl::dist {

namespace {

std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Reads the variables of one process' environment; every error names the variable.
struct Reader {
  const EnvLookup& env;
  const char* get(const char* name) const {
    const char* v = env(name);
    return v && *v ? v : nullptr;  // an empty variable counts as unset
  }
  int integer(const char* name) const {
    const char* v = get(name);
    if (!v) return -1;
    auto parsed = parse_int(v);
    MINIDL_CHECK(parsed && *parsed >= 0 && *parsed <= INT32_MAX, "rendezvous: ", name, "='", v,
                 "' is not an integer");
    return static_cast<int>(*parsed);
  }
  // The first set variable of `names`, or "".
  std::string first(std::initializer_list<const char*> names, const char** which) const {
    for (const char* n : names)
      if (const char* v = get(n)) {
        *which = n;
        return v;
      }
    return "";
  }
};

// This node's entry of a tasks-per-node list (SLURM_NODEID picks it; one distinct value needs
// none).
int local_tasks(const Reader& r) {
  if (int n = r.integer("SLURM_NTASKS_PER_NODE"); n > 0) return n;
  const char* which = nullptr;
  const std::string text = r.first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &which);
  if (text.empty()) return -1;
  std::vector<int> counts;
  try {
    counts = expand_tasks_per_node(text);
  } catch (const Error& e) {
    MINIDL_FAIL("rendezvous: ", which, ": ", e.what());
  }
  const int node = r.integer("SLURM_NODEID");
  if (node >= 0) {
    MINIDL_CHECK(size_t(node) < counts.size(), "rendezvous: SLURM_NODEID=", node, " but ", which,
                 "='", text, "' lists ", counts.size(), " node(s)");
    return counts[size_t(node)];
  }
  for (int c : counts)
    if (c != counts.front()) return -1;  // unknown node: let the rendezvous count the hosts
  return counts.front();
}

void read_slurm(const Reader& r, LaunchEnv& e) {
  e.rank = r.integer("SLURM_PROCID");
  e.world_size = r.integer("SLURM_NTASKS");
  if (e.world_size < 0) e.world_size = r.integer("SLURM_NPROCS");
  e.local_rank = r.integer("SLURM_LOCALID");
  e.local_world_size = local_tasks(r);
  const char* which = nullptr;
  const std::string nodes =
      r.first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &which);
  if (!nodes.empty()) {
    try {
      e.master_addr = first_host(nodes);
    } catch (const Error& err) {
      MINIDL_FAIL("rendezvous: ", which, ": ", err.what());
    }
  }
  const int job =
      r.integer("SLURM_JOB_ID") >= 0 ? r.integer("SLURM_JOB_ID") : r.integer("SLURM_JOBID");
  if (job >= 0) e.master_port = slurm_port(job);
}

// Inside a Slurm job step (srun), not the batch script.
bool slurm_step(const Reader& r) {
  return r.get("SLURM_PROCID") && (r.get("SLURM_STEP_ID") || r.get("SLURM_STEPID"));
}

}  // namespace

LaunchEnv parse_launch_env(const EnvLookup& env) {
  const Reader r{env};
  LaunchEnv e;
  if (r.get("RANK")) {
    e.source = "torchrun";
  } else if (r.get("OMPI_COMM_WORLD_RANK")) {
    e.source = "OpenMPI";
    e.rank = r.integer("OMPI_COMM_WORLD_RANK");
    e.world_size = r.integer("OMPI_COMM_WORLD_SIZE");
    e.local_rank = r.integer("OMPI_COMM_WORLD_LOCAL_RANK");
    e.local_world_size = r.integer("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (r.get("PMI_RANK") &&
             !(slurm_step(r) && r.integer("PMI_RANK") == r.integer("SLURM_PROCID") &&
               r.integer("PMI_SIZE") == r.integer("SLURM_NTASKS"))) {
    // MPICH's and Intel MPI's Hydra. (srun --mpi=pmi2 sets PMI_* too, equal to SLURM_PROCID /
    // SLURM_NTASKS: that is a Slurm step, below, with its derived master. Hydra bootstrapping
    // its proxies through srun is not: there SLURM_PROCID numbers nodes, not ranks.)
    e.source = "MPICH";
    e.rank = r.integer("PMI_RANK");
    e.world_size = r.integer("PMI_SIZE");
    e.local_rank = r.integer("MPI_LOCALRANKID");
    e.local_world_size = r.integer("MPI_LOCALNRANKS");
  } else if (r.get("SLURM_PROCID")) {
    if (slurm_step(r)) {
      e.source = "Slurm";
      read_slurm(r, e);
    } else {
      const char* job = r.get("SLURM_JOB_ID");
      const char* ntasks = r.get("SLURM_NTASKS");
      e.note = std::string("SLURM_PROCID=") + r.get("SLURM_PROCID") +
               (ntasks ? std::string(" and SLURM_NTASKS=") + ntasks : std::string()) +
               " are set but SLURM_STEP_ID is not: this is the batch script" +
               (job ? std::string(" of job ") + job : std::string()) +
               ", not an srun job step, so no other rank will join; running as one process "
               "(world size 1). Start the ranks with srun.";
    }
  }
  // Explicit torchrun-style variables win over what a launcher's own names say.
  auto override_with = [&](const char* name, int& field) {
    if (int v = r.integer(name); v >= 0) field = v;
  };
  override_with("RANK", e.rank);
  override_with("WORLD_SIZE", e.world_size);
  override_with("LOCAL_RANK", e.local_rank);
  override_with("LOCAL_WORLD_SIZE", e.local_world_size);
  override_with("MASTER_PORT", e.master_port);
  if (const char* a = r.get("MASTER_ADDR")) e.master_addr = a;
  return e;
}

LaunchEnv read_launch_env() {
  return parse_launch_env([](const char* name) { return std::getenv(name); });
}

bool launched_as_rank() {
  const LaunchEnv e = read_launch_env();
  static std::atomic<bool> noted{false};
  if (!e.note.empty() && !noted.exchange(true))
    std::fprintf(stderr, "minidl: %s\n", e.note.c_str());
  return !e.source.empty();
}

int slurm_port(int64_t job_id) {
  return static_cast<int>(20000 + job_id % 20000);
}

}  // namespace minidl::dist
