// MINIDL_UNFUSED (tensor/variants.h): which fused paths run their predecessor instead.
#include "tensor/variants.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "tensor/error.h"

namespace minidl::variants {
namespace {

constexpr std::array<std::string_view, 13> kFeatures = {"linear_wgrad",
                                                        "qkv_attention",
                                                        "foreach_clip",
                                                        "classifier_loss",
                                                        "autocast_linear",
                                                        "autocast_weight_copies",
                                                        "residual_layer_norm",
                                                        "linear_gelu",
                                                        "flash_attention",
                                                        "mlp_dgelu",
                                                        "optimizer_weight_copies",
                                                        "embedding_grad_add",
                                                        "flash_ldmatrix"};

// Bit i: feature i runs unfused.
std::atomic<unsigned> g_unfused{0};
std::once_flag g_env_once;

unsigned parse(const std::string& list, const char* source) {
  unsigned bits = 0;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string_view name = std::string_view(list).substr(pos, comma - pos);
    pos = comma + 1;
    if (name.empty()) continue;
    if (name == "all") {
      bits = (1u << kFeatures.size()) - 1;
      continue;
    }
    bool known = false;
    for (size_t i = 0; i < kFeatures.size(); ++i)
      if (name == kFeatures[i]) bits |= 1u << i, known = true;
    MINIDL_CHECK(known, source, ": unknown feature `", name, "` (known: ", feature_names(),
                 ", all)");
  }
  return bits;
}

void read_env() {
  std::call_once(g_env_once, [] {
    const char* env = std::getenv("MINIDL_UNFUSED");
    if (env != nullptr) g_unfused.store(parse(env, "MINIDL_UNFUSED"));
  });
}

}  // namespace

bool fused(std::string_view feature) {
  read_env();
  for (size_t i = 0; i < kFeatures.size(); ++i)
    if (feature == kFeatures[i]) return (g_unfused.load(std::memory_order_relaxed) >> i & 1u) == 0;
  MINIDL_FAIL("variants::fused: unknown feature `", feature, "` (known: ", feature_names(), ")");
}

void set_unfused(const std::string& list) {
  read_env();  // the environment no longer applies afterwards
  g_unfused.store(parse(list, "set_unfused"));
}

std::string_view feature_names() {
  static const std::string names = [] {
    std::string s;
    for (std::string_view f : kFeatures) s += (s.empty() ? "" : ", ") + std::string(f);
    return s;
  }();
  return names;
}

}  // namespace minidl::variants
