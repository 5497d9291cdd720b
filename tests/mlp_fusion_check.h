// Shared by the MLP fusion tests (test_linear_gelu.cpp, test_mlp_dgelu.cpp): one nn::MLP step
// fused, under MINIDL_UNFUSED=<variant>, and fused with a forward hook on one of its Linears
// (the hook makes the MLP take the separate calls); values and gradients bitwise equal, the
// fused step one dispatch fewer in the counted pass, the hooked step as many as the unfused.
#pragma once
#include <doctest/doctest.h>

#include <optional>
#include <utility>
#include <vector>

#include "autograd/autocast.h"
#include "nn/transformer.h"
#include "test_util.h"

namespace testutil {

enum class CountedPass { forward, backward };

// mlp:[*,16] in and out; hooked: mlp.c_fc or mlp.c_proj; bf16: the forward under bf16 autocast.
inline void check_mlp_fusion(nn::MLP& mlp, const char* variant, nn::Module& hooked, bool bf16,
                             CountedPass counted) {
  const auto step = [&](bool fused, bool hook) {
    ScopedUnfused off(fused ? "" : variant);
    amp::clear_autocast_cache();
    nn::Module::RemovableHandle handle;
    int calls = 0;
    if (hook)
      handle =
          hooked.register_forward_hook([&](nn::Module&, const std::vector<Tensor>&, const Tensor&) {
            ++calls;
            return std::optional<Tensor>();
          });
    mlp.zero_grad();
    Tensor x = random_tensor({2, 3, 16}, kFloat32, 7).requires_grad_();
    Tensor y;
    const auto forward = [&] {
      amp::autocast ac(DeviceType::cpu, kBFloat16, bf16);
      y = mlp(x);
    };
    int64_t n = 0;
    if (counted == CountedPass::forward) {
      n = dispatches_of(forward);
      sum(y.to(kFloat32)).backward();
    } else {
      forward();
      const Tensor loss = sum(y.to(kFloat32));
      n = dispatches_of([&] { loss.backward(); });
    }
    handle.remove();
    CHECK(calls == (hook ? 1 : 0));
    std::vector<Tensor> v{y.detach(), x.grad()};
    for (const Tensor& p : mlp.parameters()) v.push_back(p.grad());
    return std::make_pair(n, v);
  };
  const auto [nf, f] = step(true, false);
  const auto [nu, u] = step(false, false);
  const auto [nh, h] = step(true, true);
  CHECK(nf == nu - 1);
  CHECK(nh == nu);
  for (size_t i = 0; i < f.size(); ++i) {
    CAPTURE(i);
    CHECK(bitwise_equal(f[i], u[i]));
    CHECK(bitwise_equal(h[i], u[i]));
  }
  amp::clear_autocast_cache();
}

}  // namespace testutil
