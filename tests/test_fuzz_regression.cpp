// Replays the fuzz targets' committed inputs (tests/fuzz/corpus/<target>/ seeds and
// tests/fuzz/regressions/<target>/ crash reproducers) through the target bodies: each input
// may be rejected with minidl::Error, never crash or break a target's invariant. The seeds
// must also be valid inputs, so that fuzzing starts from the parsers' deep paths.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/image/image_io.h"
#include "data/mnist.h"
#include "fuzz/fuzz_targets.h"
#include "optim/checkpoint.h"
#include "tensor/safetensors.h"
#include "parallel/store/tcp_store_server.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

using Body = int (*)(const uint8_t*, size_t);

const fs::path kFuzzDir = MINIDL_FUZZ_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<fs::path> inputs(const std::string& kind, const std::string& target) {
  std::vector<fs::path> out;
  const fs::path dir = kFuzzDir / kind / target;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs every committed input of `target`; returns how many there were.
size_t replay(const std::string& target, Body body) {
  size_t n = 0;
  for (const std::string kind : {"corpus", "regressions"}) {
    for (const fs::path& p : inputs(kind, target)) {
      const std::string bytes = slurp(p);
      INFO("input ", p.string(), " (", bytes.size(), " bytes)");
      CHECK_NOTHROW(body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++n;
    }
  }
  return n;
}

}  // namespace

TEST_SUITE("fuzz_regression") {
  TEST_CASE("fuzz regression: IDX inputs replay, the seeds are valid IDX pairs") {
    CHECK(replay("idx", fuzz::fuzz_idx) >= 4);
    for (const fs::path& p : inputs("corpus", "idx")) {
      INFO("seed ", p.string());
      std::string b = slurp(p);
      std::vector<uint8_t> bytes(b.begin(), b.end());
      if (p.filename().string().rfind("pair_", 0) != 0) {
        CHECK_NOTHROW(data::parse_idx(bytes, p.string()));
        continue;
      }
      REQUIRE(bytes.size() >= 2);
      const size_t first = bytes[0] | size_t(bytes[1]) << 8;
      REQUIRE(first + 2 <= bytes.size());
      data::IdxArray img = data::parse_idx({bytes.begin() + 2, bytes.begin() + 2 + first}, "img");
      data::IdxArray lab = data::parse_idx({bytes.begin() + 2 + first, bytes.end()}, "lab");
      CHECK(img.dims == std::vector<int64_t>{2, 28, 28});
      CHECK(lab.dims == std::vector<int64_t>{2});
    }
  }

  TEST_CASE("fuzz regression: safetensors inputs replay, the seeds load") {
    CHECK(replay("safetensors", fuzz::fuzz_safetensors) >= 3);
    for (const fs::path& p : inputs("corpus", "safetensors")) {
      INFO("seed ", p.string());
      CHECK_NOTHROW(load_safetensors_bytes(slurp(p)));
    }
  }

  TEST_CASE("fuzz regression: checkpoint inputs replay, the seed checkpoints resume") {
    CHECK(replay("checkpoint", fuzz::fuzz_checkpoint) >= 3);
    int loaded = 0;
    for (const fs::path& p : inputs("corpus", "checkpoint")) {
      INFO("seed ", p.string());
      fuzz::CheckpointTarget t;
      const std::string name = p.filename().string();
      if (name == "plain_weights") {
        CHECK_NOTHROW(nn::load_weights(p.string(), *t.model));
      } else if (name == "model_only") {
        CHECK_NOTHROW(nn::load_checkpoint(p.string(), *t.model));
      } else {
        CHECK_NOTHROW(nn::load_checkpoint(p.string(), *t.model, t.opt.get(), t.sched.get()));
        CHECK_NOTHROW(t.train_step());
        ++loaded;
      }
    }
    CHECK(loaded >= 2);
    // A corrupt scheduler counter is an error, not an out-of-range float-to-int conversion.
    const fs::path bad = kFuzzDir / "regressions/checkpoint/scheduler-last-epoch-1e300";
    fuzz::CheckpointTarget t;
    CHECK_THROWS_WITH_AS(nn::load_checkpoint(bad.string(), *t.model, t.opt.get(), t.sched.get()),
                         doctest::Contains("scheduler.last_epoch is 1e+300"), Error);
  }

  TEST_CASE("fuzz regression: store message inputs replay, the seed frames all parse") {
    CHECK(replay("store_message", fuzz::fuzz_store_message) >= 5);
    for (const fs::path& p : inputs("corpus", "store_message")) {
      INFO("seed ", p.string());
      const std::string b = slurp(p);
      const auto* data = reinterpret_cast<const uint8_t*>(b.data());
      size_t pos = 0, frames = 0;
      for (int64_t len; (len = dist::detail::store_frame_length(data + pos, b.size() - pos)) > 0;) {
        CHECK(dist::detail::parse_store_request(data + pos + 4, size_t(len)).has_value());
        pos += 4 + size_t(len);
        ++frames;
      }
      CHECK(frames >= 1);
      CHECK(pos == b.size());
    }
  }

  TEST_CASE("fuzz regression: image inputs replay, the seeds decode in every mode") {
    CHECK(replay("image", fuzz::fuzz_image) >= 6);
    for (const fs::path& p : inputs("corpus", "image")) {
      INFO("seed ", p.string());
      for (auto mode : {data::ImageReadMode::UNCHANGED, data::ImageReadMode::GRAY,
                        data::ImageReadMode::GRAY_ALPHA, data::ImageReadMode::RGB,
                        data::ImageReadMode::RGB_ALPHA})
        CHECK_NOTHROW(data::read_image(p.string(), mode));
    }
  }
}
