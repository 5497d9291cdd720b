// Launcher detection (parallel/rendezvous/launch_env.h) from given environments, no process-wide
// setenv: torchrun, OpenMPI, MPICH / Intel MPI (PMI_*, MPI_LOCAL*), Slurm job steps (master from
// the nodelist, port from the job id, local size from the tasks-per-node syntax), the batch script
// without srun (world size 1 and a note), precedence, and Slurm's hostlist syntax.
#include <doctest/doctest.h>

#include <map>

#include "parallel/rendezvous/launch_env.h"
#include "tensor/error.h"

using namespace minidl::dist;

namespace {

using Env = std::map<std::string, std::string>;

LaunchEnv parse(const Env& env) {
  return parse_launch_env([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const minidl::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

using Hosts = std::vector<std::string>;

}  // namespace

TEST_CASE("launch env: MPICH / Intel MPI's PMI_* and MPI_LOCAL* like OpenMPI's") {
  LaunchEnv e = parse({{"PMI_RANK", "3"},
                       {"PMI_SIZE", "4"},
                       {"MPI_LOCALRANKID", "1"},
                       {"MPI_LOCALNRANKS", "2"},
                       {"MASTER_ADDR", "10.0.0.2"},
                       {"MASTER_PORT", "29400"}});
  CHECK(e.source == "MPICH");
  CHECK((e.rank == 3 && e.world_size == 4 && e.local_rank == 1 && e.local_world_size == 2));
  CHECK((e.master_addr == "10.0.0.2" && e.master_port == 29400));
  // Precedence: OpenMPI's names over PMI_*, RANK (torchrun) over both; explicit WORLD_SIZE /
  // LOCAL_* win field by field.
  e = parse({{"PMI_RANK", "3"},
             {"PMI_SIZE", "4"},
             {"OMPI_COMM_WORLD_RANK", "1"},
             {"OMPI_COMM_WORLD_SIZE", "2"}});
  CHECK((e.source == "OpenMPI" && e.rank == 1 && e.world_size == 2));
  e = parse({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK((e.source == "torchrun" && e.rank == 0 && e.world_size == 1));
  e = parse({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}});
  CHECK((e.source == "MPICH" && e.rank == 3 && e.world_size == 8 && e.local_world_size == 4));
  CHECK(contains(error_of([] {
                   parse({{"PMI_RANK", "0"}, {"PMI_SIZE", "two"}});
                 }),
                 "PMI_SIZE='two' is not an integer"));
  // srun --mpi=pmi2 sets PMI_* equal to the step's ranks: a Slurm step (master derived) ...
  Env pmi2 = {{"PMI_RANK", "1"},
              {"PMI_SIZE", "2"},
              {"SLURM_PROCID", "1"},
              {"SLURM_NTASKS", "2"},
              {"SLURM_STEP_ID", "0"},
              {"SLURM_JOB_ID", "5"},
              {"SLURM_STEP_NODELIST", "n[3-4]"}};
  e = parse(pmi2);
  CHECK((e.source == "Slurm" && e.rank == 1 && e.master_addr == "n3" && e.master_port == 20005));
  // ... while Hydra's proxies started by srun number nodes in SLURM_PROCID: PMI_* rule.
  pmi2["PMI_RANK"] = "3";
  pmi2["PMI_SIZE"] = "4";
  e = parse(pmi2);
  CHECK((e.source == "MPICH" && e.rank == 3 && e.world_size == 4 && e.master_addr.empty()));
}

TEST_CASE("launch env: a Slurm job step needs no MASTER_ADDR / MASTER_PORT") {
  Env step = {{"SLURM_PROCID", "2"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_LOCALID", "0"},
              {"SLURM_NODEID", "1"},
              {"SLURM_STEP_ID", "0"},
              {"SLURM_JOB_ID", "123456"},
              {"SLURM_STEP_NODELIST", "gpu[07-08]"},
              {"SLURM_JOB_NODELIST", "gpu[01-08]"},
              {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_TASKS_PER_NODE", "8(x8)"}};
  LaunchEnv e = parse(step);
  CHECK(e.source == "Slurm");
  CHECK((e.rank == 2 && e.world_size == 4 && e.local_rank == 0 && e.local_world_size == 2));
  CHECK(e.master_addr == "gpu07");  // the step's first node, not the job's
  CHECK(e.master_port == 20000 + 123456 % 20000);
  CHECK(e.note.empty());
  // The job's lists when the step's are missing; SLURM_NTASKS_PER_NODE first; this node's entry.
  step.erase("SLURM_STEP_NODELIST");
  step.erase("SLURM_STEP_TASKS_PER_NODE");
  step["SLURM_TASKS_PER_NODE"] = "3,1";
  e = parse(step);
  CHECK((e.master_addr == "gpu01" && e.local_world_size == 1));
  step["SLURM_NTASKS_PER_NODE"] = "2";
  CHECK(parse(step).local_world_size == 2);
  // MASTER_ADDR / MASTER_PORT win.
  step["MASTER_ADDR"] = "10.1.1.1";
  step["MASTER_PORT"] = "29555";
  e = parse(step);
  CHECK((e.master_addr == "10.1.1.1" && e.master_port == 29555));
  // Errors name the variable.
  step.erase("SLURM_NTASKS_PER_NODE");
  step["SLURM_TASKS_PER_NODE"] = "2(y2)";
  CHECK(contains(error_of([&] { parse(step); }), "SLURM_TASKS_PER_NODE"));
  step["SLURM_TASKS_PER_NODE"] = "2";
  CHECK(contains(error_of([&] { parse(step); }), "SLURM_NODEID=1 but SLURM_TASKS_PER_NODE='2'"));
}

TEST_CASE("launch env: a Slurm batch script without srun runs as one process") {
  // What sbatch sets for the batch script: SLURM_PROCID=0 and SLURM_NTASKS, no SLURM_STEP_ID.
  LaunchEnv e = parse({{"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "2"},
                       {"SLURM_JOB_ID", "77"},
                       {"SLURM_JOB_NODELIST", "n[1-2]"},
                       {"SLURM_TASKS_PER_NODE", "1(x2)"}});
  CHECK(e.source.empty());  // no launcher: --mode auto trains in one process
  CHECK(e.world_size == -1);
  CHECK(contains(e.note, "SLURM_STEP_ID is not"));
  CHECK(contains(e.note, "job 77"));
  CHECK(contains(e.note, "world size 1"));
}

TEST_CASE("launch env: Slurm hostlists") {
  CHECK(expand_hostlist("n[1-3,5],gpu07") == Hosts{"n1", "n2", "n3", "n5", "gpu07"});
  CHECK(expand_hostlist("node7") == Hosts{"node7"});
  CHECK(expand_hostlist("n[08-10]") == Hosts{"n08", "n09", "n10"});
  CHECK(expand_hostlist("r[1-2]n[1-2]") == Hosts{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand_hostlist("a-[1-2]-ib,b") == Hosts{"a-1-ib", "a-2-ib", "b"});
  CHECK(first_host("n[1-3,5],gpu07") == "n1");
  CHECK(first_host("gpu07,n[1-3]") == "gpu07");
  CHECK(first_host("n[008-100]") == "n008");
  for (const char* bad : {"n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "", "n1,,n2", "[1-2]"})
    CHECK_MESSAGE(contains(error_of([&] { expand_hostlist(bad); }), "hostlist"), bad);
}

TEST_CASE("launch env: Slurm tasks per node") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("1,2(x2)") == std::vector<int>{1, 2, 2});
  for (const char* bad : {"", "2(x)", "2(3)", "x", "2(x3", "-1"})
    CHECK_MESSAGE(contains(error_of([&] { expand_tasks_per_node(bad); }), "tasks per node"), bad);
  CHECK(slurm_port(0) == 20000);
  CHECK(slurm_port(123456) == 23456);
}
