// Which launcher started this process and the rank layout it gave: torchrun / minidl-run
// (RANK, WORLD_SIZE, ...), OpenMPI (OMPI_COMM_WORLD_*), MPICH / Intel MPI (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID, MPI_LOCALNRANKS) and Slurm job steps (SLURM_PROCID, ...; the master is the
// step's first node, the port derived from the job id). Also Slurm's hostlist ("n[1-3,5],gpu07")
// and tasks-per-node ("2(x3),1") syntaxes, parsed here (no libslurm).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace minidl::dist {

// The launcher's variables (-1 / empty when unset). Precedence: RANK set -> "torchrun"; else
// OMPI_COMM_WORLD_RANK -> "OpenMPI"; else PMI_RANK -> "MPICH" (also Intel MPI's Hydra) unless
// PMI_RANK / PMI_SIZE equal a Slurm step's SLURM_PROCID / SLURM_NTASKS (srun --mpi=pmi2); else
// SLURM_PROCID inside a job step (SLURM_STEP_ID set) -> "Slurm". Whatever the source, an explicit
// RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT wins.
// Slurm without MASTER_ADDR: the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
// SLURM_NODELIST); without MASTER_PORT: slurm_port(SLURM_JOB_ID). Local world size:
// SLURM_NTASKS_PER_NODE, else this node's (SLURM_NODEID) entry of SLURM_STEP_TASKS_PER_NODE /
// SLURM_TASKS_PER_NODE.
// A batch script that runs the program without srun has SLURM_PROCID / SLURM_NTASKS but no
// SLURM_STEP_ID: no rank of the job step will ever join, so that is no launcher (source ""),
// world size 1, and `note` says why (the caller prints it once).
struct LaunchEnv {
  int rank = -1, world_size = -1, local_rank = -1, local_world_size = -1;
  std::string master_addr;
  int master_port = -1;
  std::string source;  // "torchrun", "OpenMPI", "MPICH", "Slurm" or "" (no launcher)
  std::string note;    // why Slurm's variables were not used, or ""
};

using EnvLookup = std::function<const char*(const char*)>;  // getenv-like; nullptr: unset
LaunchEnv parse_launch_env(const EnvLookup& env);
LaunchEnv read_launch_env();  // parse_launch_env(std::getenv)

// True when a launcher started this process as one rank of a job (read_launch_env().source set).
bool launched_as_rank();

// ---------------------------------------------------------------- Slurm syntax (unit-tested)

// "n[1-3,5],gpu07" -> n1 n2 n3 n5 gpu07; zero padding is kept ("n[08-10]" -> n08 n09 n10) and
// several bracket groups multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws naming the
// list on malformed input (unbalanced brackets, "5-3", empty names).
std::vector<std::string> expand_hostlist(const std::string& list);
// The first host of a hostlist without expanding the rest.
std::string first_host(const std::string& list);
// "2(x3),1" -> 2 2 2 1. Throws naming the text on malformed input.
std::vector<int> expand_tasks_per_node(const std::string& text);
// The store port of Slurm job `job_id` when MASTER_PORT is unset: 20000 + job_id % 20000, so that
// every rank of a job agrees without talking, and concurrent jobs rarely collide.
int slurm_port(int64_t job_id);

}  // namespace minidl::dist
