// minidl-compare: single device vs DataParallel vs DDP on the same model, data and global batch.
// Each mode runs as its own child process (DDP: K ranks through the launcher); the parent checks
// that their losses agree, prints the table, the explanations and the cost-model projection, and
// writes --json / --plot. See --help and README ("minidl-compare").
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apps/compare/report.h"
#include "apps/compare/run.h"
#include "tensor/atomic_file.h"
#include "parallel/launch/launcher.h"
#include "tensor/error.h"

namespace {

using namespace minidl;
using namespace minidl::compare;
namespace fs = std::filesystem;

struct Options {
  RunConfig run;
  std::string modes = "single,dp,ddp";
  std::string json, plot;
  std::string links = "nvlink,pcie,ib100,eth10";
  double bandwidth_gbps = 0, latency_us = -1;
  int rounds = 3;
  double tolerance = 0;     // 0: 1e-4 in f32, 3e-2 with AMP
  int dp_threads = 0;       // 0: --devices
  std::string worker, out;  // internal: run one mode and write its JSON row to `out`
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool broken(const std::string& mode) {
  const char* v = std::getenv("MINIDL_COMPARE_BREAK");
  if (!v) return false;
  for (const std::string& m : split(v))
    if (m == mode) return true;
  return false;
}

std::string self_exe() {
  return fs::read_symlink("/proc/self/exe").string();
}

// The worker's arguments for one mode.
std::vector<std::string> worker_args(const Options& o, const std::string& mode, int devices,
                                     int threads, int64_t compute_batch, const std::string& out) {
  const RunConfig& c = o.run;
  return {self_exe(),
          "--worker",
          mode,
          "--out",
          out,
          "--model",
          c.model,
          "--data",
          c.data,
          "--devices",
          std::to_string(devices),
          "--threads",
          std::to_string(threads),
          "--global-batch",
          std::to_string(c.global_batch),
          "--steps",
          std::to_string(c.steps),
          "--warmup",
          std::to_string(c.warmup),
          "--amp",
          c.amp,
          "--device",
          c.device,
          "--seed",
          std::to_string(c.seed),
          "--workers",
          std::to_string(c.num_workers),
          "--compute-batch",
          std::to_string(compute_batch),
          "--powersgd-rank",
          std::to_string(c.powersgd_rank)};
}

// Runs argv as a child with OMP_NUM_THREADS=threads; returns its exit code (128+signal).
int run_child(const std::vector<std::string>& args, int threads) {
  const pid_t pid = ::fork();
  MINIDL_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return dist::exit_code_of(status);
}

RunResult read_row(const std::string& path, const std::string& label) {
  std::ifstream f(path);
  MINIDL_CHECK(f.good(), "mode ", label, " wrote no result (", path, ")");
  nlohmann::json j;
  f >> j;
  RunResult r = run_result_from_json(j);
  r.label = label;
  return r;
}

int run_worker(const Options& o) {
  RunConfig c = o.run;
  c.mode = o.worker;
  c.perturb = broken(c.mode);
  RunResult r = run_mode(c);
  const char* rank = std::getenv("RANK");
  if (!rank || std::string(rank) == "0") write_file_atomic(o.out, to_json(r).dump() + "\n");
  return 0;
}

// The 1-minute load average ("?" when unreadable).
std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a;
  return (f >> a) ? a : "?";
}

int run_compare(Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  RunConfig& c = o.run;
  const std::vector<std::string> modes = split(o.modes);
  for (const std::string& m : modes) parse_mode(m);
  MINIDL_CHECK(!modes.empty(), "--modes is empty");
  MINIDL_CHECK(c.global_batch % c.devices == 0, "--global-batch ", c.global_batch,
               " is not divisible by --devices ", c.devices);
  std::vector<Link> links;
  for (const std::string& l : split(o.links)) links.push_back(named_link(l));
  if (o.bandwidth_gbps > 0)
    links.push_back(Link{"custom", o.bandwidth_gbps * 1e9, std::max(o.latency_us, 0.0) * 1e-6});
  MINIDL_CHECK(fs::exists(c.data), "no data at '", c.data, "' (",
               c.model == "gpt" ? "bash tools/fetch-moby-dick.sh" : "bash tools/fetch-mnist.sh",
               " fetches it, or give --data)");

  const fs::path dir = fs::temp_directory_path() / ("minidl-compare-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  const bool cpu = c.device == "cpu";
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const bool with_ddp = std::any_of(modes.begin(), modes.end(), is_multiprocess_mode);

  Report rep;
  rep.cores = cores;
  rep.load_before = loadavg();
  // threads: the worker's intra-op threads (the calling thread's); omp: OMP_NUM_THREADS, the
  // default of every other thread (DataParallel's replica threads).
  auto run_one = [&](const std::string& mode, const std::string& label, int devices, int threads,
                     int omp, int64_t compute_batch) {
    const std::string out =
        (dir / (label.substr(0, label.find(' ')) + std::to_string(threads) + ".json")).string();
    std::printf("running %s...\n", label.c_str());
    std::fflush(stdout);
    std::vector<std::string> args = worker_args(o, mode, devices, threads, compute_batch, out);
    int rc;
    if (is_multiprocess_mode(mode)) {
      dist::LaunchOptions lo;
      lo.log_dir = "none";
      lo.device_per_rank = "none";
      lo.verbose = false;
      lo.backend = cpu ? "gloo" : "nccl";
      lo.nproc_per_node = devices;
      ::setenv("OMP_NUM_THREADS", std::to_string(omp).c_str(), 1);
      rc = dist::launch(lo, args);
      ::unsetenv("OMP_NUM_THREADS");
    } else {
      rc = run_child(args, omp);
    }
    MINIDL_CHECK(rc == 0, "mode ", label, " failed (exit code ", rc, ")");
    rep.rows.push_back(read_row(out, label));
    set_row_tolerance(rep.rows.back(), c.model);
  };
  const int64_t per_rank = c.global_batch / c.devices;
  // Rounds of every mode in turn; each row is the round with the median throughput, so a burst
  // of other work on the machine moves one round, not the table.
  std::vector<std::vector<RunResult>> rounds;  // [row][round]
  double max_rel_diff = 0, loose_max_rel_diff = 0;
  for (int round = 0; round < o.rounds; ++round) {
    rep.rows.clear();
    for (const std::string& m : modes) {
      if (m == "single") {
        run_one("single", "single", 1, 1, 1, with_ddp ? per_rank : 0);
        if (cpu && cores > 1)
          run_one("single", "single (" + std::to_string(cores) + " threads)", 1, cores, cores, 0);
      } else if (m == "dp") {
        // Replicas' forwards: 1 thread each; the backward of all replicas (one autograd graph,
        // run by the calling thread): --dp-threads intra-op threads.
        run_one(m, m, c.devices, cpu ? o.dp_threads : 1, 1, 0);
      } else {
        run_one(m, m, c.devices, 1, 1, 0);
      }
    }
    rep.consistency = check_consistency(rep.rows, o.tolerance);
    max_rel_diff = std::max(max_rel_diff, rep.consistency.max_rel_diff);
    loose_max_rel_diff = std::max(loose_max_rel_diff, rep.consistency.loose_max_rel_diff);
    if (!rep.consistency.error.empty()) break;
    rounds.resize(rep.rows.size());
    for (size_t k = 0; k < rep.rows.size(); ++k) rounds[k].push_back(rep.rows[k]);
  }
  if (rep.consistency.error.empty()) {
    for (size_t k = 0; k < rounds.size(); ++k) {
      std::vector<RunResult>& v = rounds[k];
      std::sort(v.begin(), v.end(), [](const RunResult& a, const RunResult& b) {
        return a.samples_per_s() < b.samples_per_s();
      });
      rep.rows[k] = v[v.size() / 2];
      for (const RunResult& r : v) rep.rows[k].round_samples_per_s.push_back(r.samples_per_s());
    }
    rep.consistency = check_consistency(rep.rows, o.tolerance);
    rep.consistency.max_rel_diff = std::max(rep.consistency.max_rel_diff, max_rel_diff);
    rep.consistency.loose_max_rel_diff =
        std::max(rep.consistency.loose_max_rel_diff, loose_max_rel_diff);
  }

  char title[256];
  std::snprintf(title, sizeof(title), "%s, global batch %lld, %lld steps after %lld warm-up, %s%s",
                c.model.c_str(), (long long)c.global_batch, (long long)c.steps, (long long)c.warmup,
                c.device.c_str(), c.amp == "off" ? "" : (", amp " + c.amp).c_str());
  rep.title = title;
  rep.load_after = loadavg();
  if (rep.consistency.error.empty()) build_projection(rep, links);
  if (!o.json.empty()) write_file_atomic(o.json, report_json(rep).dump(2) + "\n");
  if (!rep.consistency.error.empty()) {
    std::fprintf(stderr, "minidl-compare: error: %s\n", rep.consistency.error.c_str());
    return 1;
  }
  std::printf("%s\n", format_table(rep).c_str());
  for (const std::string& line : explain(rep)) std::printf("- %s\n", line.c_str());
  if (rep.has_model) std::printf("\n%s", format_projection(rep).c_str());
  if (!o.plot.empty()) std::printf("\nplot: %s\n", write_compare_plot(o.plot, rep).c_str());
  if (!o.json.empty()) std::printf("json: %s\n", o.json.c_str());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wall time: %.1f s (%d cores, load average %s before, %s after)\n", wall, cores,
              rep.load_before.c_str(), rep.load_after.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  RunConfig& c = o.run;
  c.global_batch = 0;
  int devices = 2;
  CLI::App app{"minidl-compare: single device vs DataParallel vs DDP on one model",
               "minidl-compare"};
  app.get_formatter()->column_width(30);
  app.footer(help_footer());
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", c.model, "mnist-cnn | resnet-mini (BatchNorm) | gpt")
      ->check(CLI::IsMember({"mnist-cnn", "resnet-mini", "gpt"}))
      ->capture_default_str();
  app.add_option("--data", c.data,
                 "MNIST dir / text file (default: data/mnist, "
                 "data/moby-dick/data.txt)");
  app.add_option("--modes", o.modes,
                 "comma list of single, dp, ddp, ddp-zero1, ddp-fp16, ddp-bf16, ddp-powersgd, "
                 "ddp-syncbn (resnet-mini), fsdp, fsdp-grad-op")
      ->capture_default_str();
  app.add_option("--devices", devices, "K: dp replicas and ddp processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--global-batch", c.global_batch,
                 "samples per step in every mode (default 64 x K mnist, 8 x K gpt)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--steps", c.steps, "timed steps")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed steps first")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--amp", c.amp, "off | bf16 | fp16")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--device", c.device, "cpu | cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "runs of every mode in turn; each row is the median-throughput round")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initial weights and data order")->capture_default_str();
  app.add_option("--workers", c.num_workers, "loader threads per process")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--tolerance", o.tolerance,
                 "relative loss difference allowed between modes (default 1e-4; 3e-2 with AMP)")
      ->check(CLI::PositiveNumber);
  app.add_option("--link", o.links, "projection links: comma list of nvlink, pcie, ib100, eth10")
      ->capture_default_str();
  auto* bw = app.add_option("--bandwidth", o.bandwidth_gbps, "an extra link: GB/s")
                 ->check(CLI::PositiveNumber);
  app.add_option("--latency", o.latency_us, "the extra link's latency in us")
      ->check(CLI::NonNegativeNumber)
      ->needs(bw);
  bw->needs("--latency");
  app.add_option("--dp-threads", o.dp_threads,
                 "CPU dp: intra-op threads of the joint backward of all replicas (one graph, "
                 "run by the calling thread) and the optimizer; forwards use 1 per replica "
                 "(default --devices)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--json", o.json, "write the rows, projection and check as JSON");
  app.add_option("--plot", o.plot, "bar chart + projection: .png (gnuplot) or .svg");
  // Internal: one mode's run in a child process.
  app.add_option("--worker", o.worker)->group("")->check(CLI::IsMember(known_modes()));
  app.add_option("--powersgd-rank", c.powersgd_rank,
                 "ddp-powersgd: PowerSGD's matrix approximation rank (compressing from step 3)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--out", o.out)->group("");
  app.add_option("--threads", c.threads)->group("")->check(CLI::Range(1, 1024));
  app.add_option("--compute-batch", c.compute_batch)->group("");
  try {
    app.parse(argc, argv);
    if (!o.worker.empty() && o.out.empty()) throw CLI::ValidationError("--worker needs --out");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "minidl-compare: error: %s (see --help)\n", e.what());
    return 2;
  }
  c.devices = devices;
  if (o.dp_threads == 0) o.dp_threads = devices;
  if (c.data.empty()) c.data = default_data(c.model);
  if (c.global_batch == 0) c.global_batch = (c.model == "gpt" ? 8 : 64) * devices;
  // f32 modes agree to ~1e-7 over 20 steps (measured on mnist-cnn/SGD and gpt/AdamW); half
  // precision rounds each mode's differently split matmuls differently.
  if (o.tolerance == 0) o.tolerance = c.amp == "off" ? 1e-4 : 3e-2;
  try {
    if (!o.worker.empty()) return run_worker(o);
    // Bad values: one line, exit 2.
    for (const std::string& l : split(o.links)) named_link(l);
    MINIDL_CHECK(!split(o.modes).empty(), "--modes is empty");
    for (const std::string& m : split(o.modes)) {
      parse_mode(m);
      MINIDL_CHECK(m != "ddp-syncbn" || c.model == "resnet-mini", "--modes ddp-syncbn: model ",
                   c.model, " has no BatchNorm to synchronise (--model resnet-mini has)");
    }
    if (c.global_batch % devices != 0) {
      std::fprintf(stderr,
                   "minidl-compare: error: --global-batch %lld is not divisible by --devices %d "
                   "(see --help)\n",
                   (long long)c.global_batch, devices);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidl-compare: error: %s%s\n", e.what(),
                 o.worker.empty() ? " (see --help)" : "");
    return o.worker.empty() ? 2 : 1;
  }
  try {
    return run_compare(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidl-compare: error: %s\n", e.what());
    return 1;
  }
}
