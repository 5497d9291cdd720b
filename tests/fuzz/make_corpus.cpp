// Writes the seed corpora of the fuzz targets into <dir>/<target>/ with minidl's own writers:
// IDX pairs (raw and gzip), safetensors files of every dtype, training checkpoints of the
// fuzz_checkpoint model, and TCP store request frames. Usage: fuzz_make_corpus tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/mnist.h"
#include "fuzz_targets.h"
#include "optim/checkpoint.h"
#include "tensor/safetensors.h"
#include "parallel/store/protocol.h"
#include "autograd/ops.h"
#include "tensor/random.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

std::string g_root;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::path(g_root) / target;
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  std::printf("%s/%s: %zu bytes\n", target.c_str(), name.c_str(), bytes.size());
}

// An IDX file's bytes, written by data::write_idx (gzip when `gz`).
std::string idx_bytes(const data::IdxArray& a, bool gz) {
  const std::string p =
      (fs::temp_directory_path() / (gz ? "corpus.idx.gz" : "corpus.idx")).string();
  data::write_idx(p, a);
  std::string b = slurp(p);
  fs::remove(p);
  return b;
}

void idx_corpus() {
  const int64_t n = 2;
  data::IdxArray images{{n, 28, 28}, std::vector<uint8_t>(size_t(n * 784))};
  for (size_t i = 0; i < images.bytes.size(); ++i) images.bytes[i] = uint8_t((i * 37) % 256);
  data::IdxArray labels{{n}, {3, 9}};
  for (bool gz : {false, true}) {
    const std::string img = idx_bytes(images, gz), lab = idx_bytes(labels, gz);
    std::string pair = {char(img.size() & 0xff), char(img.size() >> 8)};
    put("idx", gz ? "pair_gz" : "pair_raw", pair + img + lab);
  }
  put("idx", "labels_raw", idx_bytes(labels, false));
  put("idx", "images_4d_gz", idx_bytes({{1, 2, 3, 4}, std::vector<uint8_t>(24, 7)}, true));
}

void safetensors_corpus() {
  Generator gen(1);
  std::map<std::string, Tensor> all = {
      {"f32", randn({2, 3}, kFloat32, kCPU, &gen)},
      {"f64", scalar_tensor(2.5, kFloat64)},
      {"f16", randn({3}, kFloat32, kCPU, &gen).to(kFloat16)},
      {"bf16", randn({2, 2}, kFloat32, kCPU, &gen).to(kBFloat16)},
      {"i64", arange(0, 4, 1, kInt64)},
      {"i32", arange(0, 3, 1, kInt32)},
      {"u8", arange(0, 5, 1, kUInt8)},
      {"bool", gt(arange(0, 4, 1, kFloat32), scalar_tensor(1.5, kFloat32))},
      {"empty", zeros({0, 3}, kFloat32)}};
  put("safetensors", "all_dtypes", save_safetensors_bytes(all, {{"format", "pt"}}));
  put("safetensors", "one_tensor", save_safetensors_bytes({{"w", ones({2}, kFloat32)}}));
  put("safetensors", "metadata_only", save_safetensors_bytes({}, {{"k", "v"}}));
}

void checkpoint_corpus() {
  const std::string p = (fs::temp_directory_path() / "corpus.safetensors").string();
  fuzz::CheckpointTarget t;
  default_generator().set_state(7, 0);
  nn::save_checkpoint(p, *t.model, t.opt.get(), t.sched.get(), {{"epoch", "0"}});
  put("checkpoint", "fresh", slurp(p));
  t.train_step();
  t.train_step();
  t.train_step();
  std::map<std::string, Tensor> amp = {{"scale", scalar_tensor(65536.0, kFloat32)}};
  nn::save_checkpoint(p, *t.model, t.opt.get(), t.sched.get(), {{"epoch", "3"}}, &amp);
  put("checkpoint", "three_steps_amp", slurp(p));
  nn::save_checkpoint(p, *t.model);
  put("checkpoint", "model_only", slurp(p));
  nn::save_weights(p, *t.model);
  put("checkpoint", "plain_weights", slurp(p));
  fs::remove(p);
}

std::string frame(dist::proto::Writer w) {
  const dist::Bytes b = w.finish();
  return std::string(b.begin(), b.end());
}

void store_corpus() {
  using namespace dist::proto;
  const auto w = [](uint8_t cmd) {
    Writer x;
    x.u8(cmd);
    return x;
  };
  Writer set = w(kSet), add = w(kAdd), cas = w(kCompareSet), get = w(kGet), wait = w(kWait),
         check = w(kCheck), del = w(kDelete), num = w(kNumKeys);
  set.str("rank/0");
  set.str("127.0.0.1:29500");
  add.str("counter");
  add.i64(1);
  cas.str("leader");
  cas.str("");
  cas.str("0");
  get.str("rank/0");
  get.i64(30000);
  wait.u32(2);
  wait.str("a");
  wait.str("b");
  wait.i64(1000);
  check.u32(1);
  check.str("a");
  del.str("a");
  const std::string s = frame(set), a = frame(add), c = frame(cas), g = frame(get),
                    wt = frame(wait), ch = frame(check), d = frame(del), n = frame(num);
  put("store_message", "set", s);
  put("store_message", "add", a);
  put("store_message", "compare_set", c);
  put("store_message", "get", g);
  put("store_message", "wait", wt);
  put("store_message", "check_delete_num_keys", ch + d + n);
  put("store_message", "session", s + a + c + g + wt + ch + d + n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  idx_corpus();
  safetensors_corpus();
  checkpoint_corpus();
  store_corpus();
  return 0;
}
