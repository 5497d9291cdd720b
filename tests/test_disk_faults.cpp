// Disk faults while writing checkpoints: over a file size limit (RLIMIT_FSIZE, EFBIG) and on a
// full filesystem (a small tmpfs, ENOSPC; needs root): the error names the file and the errno,
// no partial or temporary file is left, and the previous checkpoint stays intact and resumes.
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "nn/activation.h"
#include "optim/checkpoint.h"
#include "nn/container.h"
#include "nn/linear_conv.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "tensor/random.h"
#include "test_util.h"
#if __has_include("skip.h")
#include "skip.h"  // MINIDL_SKIP: a runtime skip that ctest reports as skipped
#else
#define MINIDL_SKIP(reason)                      \
  do {                                           \
    MESSAGE("SKIPPED: " << std::string(reason)); \
    return;                                      \
  } while (false)
#endif

using namespace minidl;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A model + Adam + StepLR whose checkpoint grows with `hidden`.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  explicit Run(int64_t hidden) {
    Generator gen(3);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, hidden, true, &gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(hidden, 2, true, &gen)});
    opt = std::make_unique<optim::Adam>(model->parameters(), 0.01);
    sched = std::make_unique<optim::StepLR>(*opt, 1, 0.5);
  }
  void step() {
    Tensor x = randn({3, 4}), y = randn({3, 2});
    opt->zero_grad();
    Tensor d = sub((*model)(x), y);
    mean(mul(d, d)).backward();
    opt->step();
    sched->step();
  }
  void save(const std::string& path) { nn::save_checkpoint(path, *model, opt.get(), sched.get()); }
};

// The error of a save that must fail.
std::string failed_save(Run& run, const std::string& path) {
  try {
    run.save(path);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("save_checkpoint('", path, "') did not fail");
  return "";
}

std::vector<std::string> dir_entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The previous checkpoint at `path` (bytes `old`, written by `writer` before it trained on)
// loads into a fresh run, equals the writer's saved state, and trains on.
void check_resumes(const std::string& path, const std::string& old,
                   const std::map<std::string, Tensor>& saved_state, int64_t hidden) {
  CHECK(read_bytes(path) == old);
  Run resumed(hidden);
  nn::load_checkpoint(path, *resumed.model, resumed.opt.get(), resumed.sched.get());
  for (const auto& [k, v] : saved_state)
    CHECK_MESSAGE(testutil::bitwise_equal(v, resumed.model->state_dict().at(k)), k);
  CHECK_NOTHROW(resumed.step());
}

std::map<std::string, Tensor> clone_state(const std::map<std::string, Tensor>& sd) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : sd) out[k] = v.detach().clone();
  return out;
}

// Sets RLIMIT_FSIZE and ignores SIGXFSZ (so writes fail with EFBIG); restores both.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = SIG_DFL;
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit lim = old;
    lim.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

// A tmpfs of `bytes` mounted on a fresh directory, unmounted and removed at the end.
struct SmallTmpfs {
  fs::path dir;
  bool mounted = false;
  std::string error;
  explicit SmallTmpfs(size_t bytes) {
    dir = fs::temp_directory_path() / ("minidl_tmpfs_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0;
    if (!mounted)
      error = std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")";
  }
  ~SmallTmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

TEST_SUITE("disk_faults") {
  TEST_CASE(
      "disk faults: over RLIMIT_FSIZE a checkpoint write fails with EFBIG, the old one resumes") {
    const fs::path dir = fs::temp_directory_path() / ("minidl_fsize_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / "checkpoint-epoch-1.safetensors").string();
    Run run(4);
    run.step();
    run.save(path);
    const std::string old = read_bytes(path);
    const auto saved = clone_state(run.model->state_dict());
    Run big(512);  // ~ 40 KB: over the limit
    big.step();
    std::string msg;
    {
      FileSizeLimit limit(old.size() + 4096);
      msg = failed_save(big, path);
    }
    CHECK_MESSAGE(msg.find("'" + path + "'") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("File too large (errno 27, EFBIG)") != std::string::npos, msg);
    CHECK(dir_entries(dir) == std::vector<std::string>{"checkpoint-epoch-1.safetensors"});
    check_resumes(path, old, saved, 4);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "disk faults: on a full tmpfs a checkpoint write fails with ENOSPC, the old one resumes") {
    SmallTmpfs tmpfs(64 * 1024);
    if (!tmpfs.mounted)
      MINIDL_SKIP("cannot mount a 64 KiB tmpfs on " + tmpfs.dir.string() + ": " + tmpfs.error +
                  "; this case needs root (CAP_SYS_ADMIN)");
    const std::string path = (tmpfs.dir / "checkpoint-epoch-1.safetensors").string();
    Run run(4);
    run.step();
    run.save(path);
    const std::string old = read_bytes(path);
    const auto saved = clone_state(run.model->state_dict());

    // A checkpoint larger than the space left (~170 KB): ENOSPC, no partial file, the old one
    // intact.
    Run big(2048);
    big.step();
    std::string msg = failed_save(big, path);
    CHECK_MESSAGE(msg.find("'" + path + "'") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("No space left on device (errno 28, ENOSPC)") != std::string::npos, msg);
    CHECK(dir_entries(tmpfs.dir) == std::vector<std::string>{"checkpoint-epoch-1.safetensors"});
    check_resumes(path, old, saved, 4);

    // The filesystem completely full: a new file cannot even be started, nothing is created.
    {
      std::ofstream fill(tmpfs.dir / "fill", std::ios::binary);
      const std::string block(4096, 'x');
      for (int i = 0; i < 64 && fill.write(block.data(), std::streamsize(block.size())); ++i) {
      }
    }
    const std::string next = (tmpfs.dir / "checkpoint-epoch-2.safetensors").string();
    msg = failed_save(run, next);
    CHECK_MESSAGE(msg.find("'" + next + "'") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("ENOSPC") != std::string::npos, msg);
    CHECK(!fs::exists(next));
    CHECK(dir_entries(tmpfs.dir) ==
          std::vector<std::string>{"checkpoint-epoch-1.safetensors", "fill"});
    check_resumes(path, old, saved, 4);
  }
}
