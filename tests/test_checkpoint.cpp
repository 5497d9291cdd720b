// Training checkpoints: bitwise-exact resume (model, SGD momentum, StepLR, RNG), strict key and
// shape errors, truncated/corrupted/non-checkpoint files, atomic overwrite, plain weights.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "optim/checkpoint.h"
#include "nn/container.h"
#include "nn/linear_conv.h"
#include "tensor/safetensors.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

// A per-process scratch directory, removed when the process exits.
std::string tmp_path(const std::string& name) {
  struct ScratchDir {
    fs::path path = fs::temp_directory_path() / ("minidl_ckpt_" + std::to_string(::getpid()));
    ~ScratchDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const ScratchDir dir;
  fs::create_directories(dir.path);
  return (dir.path / name).string();
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), std::streamsize(b.size()));
}

std::shared_ptr<nn::Sequential> make_model(uint64_t seed, int64_t hidden = 8) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, hidden, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, 3, true, &gen)});
}

struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::StepLR> sched;
  explicit Trainer(uint64_t seed) : model(make_model(seed)) {
    opt = std::make_unique<optim::SGD>(model->parameters(), 0.1, 0.9);
    sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  }
  // One step on data drawn from the default generator (so RNG state matters for resuming).
  void step() {
    Tensor x = randn({5, 4}, kFloat32), y = randn({5, 3}, kFloat32);
    opt->zero_grad();
    Tensor d = sub((*model)(x), y);
    mean(mul(d, d)).backward();
    opt->step();
    sched->step();
  }
};

void check_same_state(const std::map<std::string, Tensor>& a,
                      const std::map<std::string, Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [k, v] : a) {
    REQUIRE_MESSAGE(b.count(k), k);
    CHECK_MESSAGE(testutil::bitwise_equal(v, b.at(k)), k);
  }
}

std::map<std::string, Tensor> clone_state(const std::map<std::string, Tensor>& sd) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : sd) out[k] = v.detach().clone();
  return out;
}

}  // namespace

TEST_CASE("checkpoint: resume is bitwise identical to an uninterrupted run") {
  manual_seed(123);
  Trainer ref(7);
  for (int i = 0; i < 6; ++i) ref.step();

  manual_seed(123);
  Trainer a(7);
  for (int i = 0; i < 3; ++i) a.step();
  std::string path = tmp_path("resume.safetensors");
  nn::save_checkpoint(path, *a.model, a.opt.get(), a.sched.get(), {{"epoch", "3"}});
  uint64_t seed = default_generator().seed(), offset = default_generator().offset();

  SUBCASE("continue in place") {
    for (int i = 0; i < 3; ++i) a.step();
    check_same_state(a.model->state_dict(), ref.model->state_dict());
  }
  SUBCASE("fresh objects") {
    manual_seed(999);  // clobber the RNG: the checkpoint must restore it
    (void)rand({10});
    Trainer b(42);  // different initial weights
    b.step();       // and non-empty momentum / advanced scheduler
    auto meta = nn::load_checkpoint(path, *b.model, b.opt.get(), b.sched.get());
    CHECK(meta.at("format") == "minidl-checkpoint");
    CHECK(meta.at("version") == "1");
    CHECK(meta.at("epoch") == "3");
    CHECK(default_generator().seed() == seed);
    CHECK(default_generator().offset() == offset);
    check_same_state(b.model->state_dict(), a.model->state_dict());
    check_same_state(b.opt->state_dict(), a.opt->state_dict());
    for (int i = 0; i < 3; ++i) b.step();
    check_same_state(b.model->state_dict(), ref.model->state_dict());
    check_same_state(b.opt->state_dict(), ref.opt->state_dict());
    check_same_state(b.sched->state_dict(), ref.sched->state_dict());
    CHECK(b.opt->param_groups()[0].lr() == ref.opt->param_groups()[0].lr());
    CHECK(b.sched->get_last_lr() == ref.sched->get_last_lr());
    CHECK(b.opt->param_groups()[0].lr() == 0.1 * 0.5 * 0.5 * 0.5);
  }
}

TEST_CASE("checkpoint: file layout, RNG state and u64 seeds") {
  manual_seed(0xFEDCBA9876543210ull);  // > INT64_MAX: stored bit-cast in an int64
  (void)rand({7});
  Trainer t(1);
  std::string path = tmp_path("layout.safetensors");
  nn::save_checkpoint(path, *t.model, t.opt.get(), t.sched.get());
  Tensor after_save = rand({6});
  (void)rand({100});
  SafetensorsFile f(path);
  CHECK(f.metadata().at("format") == "minidl-checkpoint");
  CHECK(f.contains("model.0.weight"));
  CHECK(f.contains("model.2.bias"));
  CHECK(f.contains("optimizer.param_groups.0.lr"));
  CHECK(f.contains("scheduler.last_epoch"));
  CHECK(f.info("rng.seed").dtype == kInt64);
  CHECK(f.info("rng.seed").shape.empty());
  CHECK(f.info("rng.offset").shape.empty());

  Trainer u(2);
  nn::load_checkpoint(path, *u.model, u.opt.get(), u.sched.get());
  CHECK(default_generator().seed() == 0xFEDCBA9876543210ull);
  CHECK(testutil::bitwise_equal(rand({6}), after_save));
  CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, *t.model, nullptr, nullptr, {{"format", "x"}}),
                       doctest::Contains("reserved key \"format\""), Error);
}

TEST_CASE("checkpoint: model only, and optimizer requested but absent") {
  auto m = make_model(3);
  std::string path = tmp_path("model_only.safetensors");
  nn::save_checkpoint(path, *m);
  auto m2 = make_model(4);
  nn::load_checkpoint(path, *m2);
  check_same_state(m2->state_dict(), m->state_dict());
  Trainer t(5);
  auto before = clone_state(t.model->state_dict());
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *t.model, t.opt.get()),
                       doctest::Contains("holds no optimizer state"), Error);
  check_same_state(t.model->state_dict(), before);
}

TEST_CASE("checkpoint: strict key errors and shape mismatch") {
  std::string path = tmp_path("strict.safetensors");
  auto m = make_model(3);
  nn::save_checkpoint(path, *m);

  // Missing/unexpected: a model whose second layer is named differently.
  auto other = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>()});
  other->push_back(std::make_shared<nn::ReLU>());
  other->push_back(std::make_shared<nn::Linear>(8, 3));  // "3.weight" instead of "2.weight"
  auto before = clone_state(other->state_dict());
  try {
    nn::load_checkpoint(path, *other);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("Missing key(s)") != std::string::npos);
    CHECK(msg.find("\"3.weight\"") != std::string::npos);
    CHECK(msg.find("\"3.bias\"") != std::string::npos);
    CHECK(msg.find("Unexpected key(s)") != std::string::npos);
    CHECK(msg.find("\"2.weight\"") != std::string::npos);
  }
  check_same_state(other->state_dict(), before);
  // strict=false loads the matching keys.
  nn::load_checkpoint(path, *other, nullptr, nullptr, /*strict=*/false);
  CHECK(
      testutil::bitwise_equal(other->state_dict().at("0.weight"), m->state_dict().at("0.weight")));

  // Shape mismatch names the key and both shapes.
  auto wide = make_model(9, /*hidden=*/6);
  auto wide_before = clone_state(wide->state_dict());
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *wide),
                       doctest::Contains("size mismatch for 0.bias"), Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *wide),
                       doctest::Contains("shape [8] from checkpoint"), Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *wide), doctest::Contains("current model is [6]"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *wide), doctest::Contains(path.c_str()), Error);
  check_same_state(wide->state_dict(), wide_before);
}

TEST_CASE("checkpoint: optimizer mismatch rolls the model back") {
  std::string path = tmp_path("rollback.safetensors");
  Trainer t(1);
  t.step();
  nn::save_checkpoint(path, *t.model, t.opt.get(), t.sched.get());
  // Same model, but an optimizer over only the first layer: the optimizer load fails after the
  // model was loaded, so the model must be restored.
  Trainer u(2);
  optim::SGD small((*u.model)[0]->parameters(), 0.1, 0.9);
  auto before = clone_state(u.model->state_dict());
  uint64_t off = default_generator().offset();
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *u.model, &small), doctest::Contains(path.c_str()),
                       Error);
  check_same_state(u.model->state_dict(), before);
  CHECK(default_generator().offset() == off);
}

TEST_CASE("checkpoint: truncated and corrupted files leave everything unchanged") {
  std::string good = tmp_path("good.safetensors"), bad = tmp_path("bad.safetensors");
  Trainer t(1);
  t.step();
  nn::save_checkpoint(good, *t.model, t.opt.get(), t.sched.get());
  std::string bytes = read_bytes(good);
  REQUIRE(bytes.size() > 100);

  Trainer u(2);
  u.step();
  auto model_before = clone_state(u.model->state_dict());
  auto opt_before = clone_state(u.opt->state_dict());
  auto sched_before = clone_state(u.sched->state_dict());
  uint64_t seed = default_generator().seed(), off = default_generator().offset();
  auto unchanged = [&] {
    check_same_state(u.model->state_dict(), model_before);
    check_same_state(u.opt->state_dict(), opt_before);
    check_same_state(u.sched->state_dict(), sched_before);
    CHECK(default_generator().seed() == seed);
    CHECK(default_generator().offset() == off);
  };
  int failures = 0;
  for (size_t len = 0; len < bytes.size(); len += 7) {
    write_bytes(bad, bytes.substr(0, len));
    try {
      nn::load_checkpoint(bad, *u.model, u.opt.get(), u.sched.get());
    } catch (const Error& e) {
      ++failures;
      CHECK_MESSAGE(std::string(e.what()).find(bad) != std::string::npos, e.what());
    }
  }
  CHECK(failures == int((bytes.size() + 6) / 7));
  unchanged();

  // Flip a bit inside the JSON header (a quote becomes '#': invalid JSON).
  std::string flipped = bytes;
  size_t q = flipped.find('"', 8);
  REQUIRE(q != std::string::npos);
  flipped[q] = char(flipped[q] ^ 0x01);
  write_bytes(bad, flipped);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(bad, *u.model, u.opt.get(), u.sched.get()),
                       doctest::Contains(bad.c_str()), Error);
  // A flipped bit in the header-size field.
  flipped = bytes;
  flipped[0] = char(flipped[0] ^ 0x10);
  write_bytes(bad, flipped);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(bad, *u.model, u.opt.get(), u.sched.get()),
                       doctest::Contains(bad.c_str()), Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(tmp_path("missing.safetensors"), *u.model),
                       doctest::Contains("missing.safetensors"), Error);
  unchanged();
}

TEST_CASE("checkpoint: non-checkpoint safetensors files are refused") {
  std::string path = tmp_path("plain.safetensors");
  auto m = make_model(3);
  nn::save_weights(path, *m);
  auto m2 = make_model(4);
  auto before = clone_state(m2->state_dict());
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *m2),
                       doctest::Contains("is not a minidl checkpoint"), Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *m2), doctest::Contains(path.c_str()), Error);
  save_safetensors({{"x", zeros({2})}}, path);  // no metadata at all
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *m2), doctest::Contains("\"format\" is missing"),
                       Error);
  check_same_state(m2->state_dict(), before);
  // And load_weights refuses a training checkpoint.
  nn::save_checkpoint(path, *m);
  CHECK_THROWS_WITH_AS(nn::load_weights(path, *m2), doctest::Contains("use load_checkpoint"),
                       Error);
}

TEST_CASE("checkpoint: plain weights round trip and module. prefix") {
  std::string path = tmp_path("weights.safetensors");
  auto m = make_model(3);
  nn::save_weights(path, *m);
  SafetensorsFile f(path);
  CHECK(f.names() == std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight"});
  CHECK(f.metadata().at("format") == "pt");
  auto m2 = make_model(4);
  auto res = nn::load_weights(path, *m2);
  CHECK(res.missing_keys.empty());
  check_same_state(m2->state_dict(), m->state_dict());

  // DataParallel-style "module." keys: stripped with one warning.
  std::map<std::string, Tensor> prefixed;
  for (const auto& [k, v] : m->state_dict()) prefixed["module." + k] = v;
  save_safetensors(prefixed, path);
  auto m3 = make_model(5);
  std::ostringstream captured;
  auto* old = std::cerr.rdbuf(captured.rdbuf());
  try {
    nn::load_weights(path, *m3);
  } catch (...) {
    std::cerr.rdbuf(old);
    throw;
  }
  std::cerr.rdbuf(old);
  std::string warn = captured.str();
  CHECK(warn.find("module.") != std::string::npos);
  CHECK(warn.find("warning") != std::string::npos);
  CHECK(warn.find("warning") == warn.rfind("warning"));  // exactly once
  check_same_state(m3->state_dict(), m->state_dict());

  // In a checkpoint too.
  std::map<std::string, Tensor> ck;
  for (const auto& [k, v] : prefixed) ck["model." + k] = v;
  ck["rng.seed"] = scalar_tensor(int64_t(1), kInt64);
  ck["rng.offset"] = scalar_tensor(int64_t(0), kInt64);
  save_safetensors(ck, path, {{"format", "minidl-checkpoint"}, {"version", "1"}});
  auto m4 = make_model(6);
  old = std::cerr.rdbuf(captured.rdbuf());
  try {
    nn::load_checkpoint(path, *m4);
  } catch (...) {
    std::cerr.rdbuf(old);
    throw;
  }
  std::cerr.rdbuf(old);
  check_same_state(m4->state_dict(), m->state_dict());

  // Strict errors from load_weights name the file.
  auto wide = make_model(9, 6);
  nn::save_weights(path, *m);
  CHECK_THROWS_WITH_AS(nn::load_weights(path, *wide), doctest::Contains(path.c_str()), Error);
}

TEST_CASE("checkpoint: a failed write keeps the previous file intact") {
  std::string path = tmp_path("atomic.safetensors");
  auto small = make_model(1, 2);
  nn::save_checkpoint(path, *small);
  std::string old_bytes = read_bytes(path);
  REQUIRE(old_bytes.size() < 4096);
  auto big = make_model(2, 512);  // ~ 16 KB of weights: the write must fail at the 8 KB limit

  // Make the write fail for real: cap the file size (EFBIG instead of SIGXFSZ).
  auto prev_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old_lim{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  rlimit lim = old_lim;
  lim.rlim_cur = 8192;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  bool threw = false;
  std::string msg;
  try {
    nn::save_checkpoint(path, *big);
  } catch (const Error& e) {
    threw = true;
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_lim);
  std::signal(SIGXFSZ, prev_handler);
  CHECK(threw);
  CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
  CHECK(read_bytes(path) == old_bytes);
  auto m = make_model(7, 2);
  nn::load_checkpoint(path, *m);
  check_same_state(m->state_dict(), small->state_dict());
  // No temporary file left behind.
  int others = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    if (e.path().filename().string().rfind("atomic.safetensors.tmp", 0) == 0) ++others;
  CHECK(others == 0);
}
