// AMP on CUDA (suite cuda_amp_scaler, skipped without a GPU) and the parity cases of the AMP and
// fused-optimizer ops (cases_amp, run CPU-vs-CUDA by this suite and CPU-vs-CPU everywhere).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda_parity.h"
#include "optim/adam.h"
#include "optim/fused.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tensor/cuda_api.h"
#include "autograd/ops.h"

using namespace minidl;
using namespace parity;

namespace {

using V = std::vector<Tensor>;

// Variant v of the AMP inputs on dev: 0 none, 1 grad_scale 4, 2 found_inf set (skip).
FusedAmpArgs amp_inputs(int v, Device dev) {
  FusedAmpArgs a;
  if (v >= 1) a.grad_scale = full({}, 4.0f, kFloat32, dev);
  if (v == 2) a.found_inf = ones({}, kFloat32, dev);
  return a;
}

V fused_sgd_case(const V& in, Device dev, int v) {
  FusedSgdArgs a;
  a.hyper = optim::fused::make_hyper([] { return optim::fused::HyperValues{0.1, 0.9, 0, 1e-2}; });
  a.params = {in[0].contiguous().clone()};
  a.grads = {in[1].contiguous().clone()};
  a.bufs = {in[2].contiguous().clone()};
  a.first = {0};
  a.nesterov = true;
  a.amp = amp_inputs(v, dev);
  optim::fused::sgd_step(a);
  return {a.params[0], a.bufs[0]};
}

V fused_adam_case(const V& in, Device dev, int v) {
  FusedAdamArgs a;
  a.hyper = optim::fused::make_hyper([] {
    return optim::fused::HyperValues{1e-2, 0.9, 0.99, 1e-8, 1e-2};
  });
  a.decoupled = v == 1;
  a.params = {in[0].contiguous().clone()};
  a.grads = {in[1].contiguous().clone()};
  a.exp_avg = {in[2].contiguous().clone()};
  a.exp_avg_sq = {abs(in[3]).contiguous().clone()};
  a.max_exp_avg_sq = {abs(in[3]).contiguous().clone()};
  a.steps = {full({}, 3.0, kFloat64, dev)};
  a.amp = amp_inputs(v, dev);
  optim::fused::adam_step(a);
  return {a.params[0], a.exp_avg[0], a.exp_avg_sq[0], a.max_exp_avg_sq[0], a.steps[0]};
}

V unscale_case(const V& in, Device dev, int v) {
  V g;
  for (const Tensor& t : in) g.push_back(t.clone());
  if (v >= 1 && g[0].numel() > 0) g[0].view({-1}).narrow(0, 0, 1).fill_(v == 1 ? INFINITY : NAN);
  if (v == 3 && g[1].dim() == 2)
    g[1] = g[1].t();  // strided (written back through a contiguous copy)
  Tensor found = zeros({}, kFloat32, dev);
  amp::non_finite_check_and_unscale_(g, found, full({}, 0.125f, kFloat32, dev));
  V out = g;
  out.push_back(found);
  return out;
}

V update_scale_case(const V& in, Device dev, int v) {
  Tensor s = full({}, v == 1 ? std::numeric_limits<float>::max() : 1024.0f, kFloat32, dev);
  Tensor tr = zeros({}, kInt32, dev);
  const Tensor flags = gt(in[0], 0.5).to(kFloat32);  // one found_inf per element
  for (int64_t i = 0; i < flags.numel(); ++i) {
    Tensor f = flags.view({-1}).narrow(0, i, 1).contiguous().view({});
    amp::amp_update_scale_(s, tr, f, 2.0, 0.5, 2);
  }
  return {s, tr};
}

// clip_grad_norm_'s two list ops over the inputs (strided ones too): variant v picks the norm
// (2, 1, inf, 3), max_norm is half the total so every tensor is scaled.
V foreach_clip_case(const V& in, Device dev, int v) {
  const double p = v == 0 ? 2.0 : v == 1 ? 1.0 : v == 2 ? INFINITY : 3.0;
  V g;
  for (const Tensor& t : in) g.push_back(t.clone());
  if (g[0].dim() == 2) g[0] = g[0].t();  // strided: written back through a contiguous copy
  const Tensor total = optim::fused::foreach_norm(g, p);
  const Tensor half = full({}, 0.5, kFloat64, dev) * total;
  optim::fused::foreach_clip_by_norm_(g, total, half.item<double>());
  V out = g;
  out.push_back(total);
  return out;
}

}  // namespace

namespace parity {

std::vector<Case> cases_amp() {
  return {
      {"non_finite_check_and_unscale",
       {"non_finite_check_and_unscale"},
       {{{4, 6}, {6, 4}, {0, 3}}, {{70000}, {5, 5}, {1}}},
       kFloats,
       unscale_case,
       4,
       -4,
       4,
       false,
       true},
      {"amp_update_scale",
       {"amp_update_scale"},
       {{{12}}},
       {kFloat32},
       update_scale_case,
       2,
       0,
       1,
       false,
       true},
      {"fused_sgd",
       {"fused_sgd"},
       {{{3, 5}, {3, 5}, {3, 5}}, {{70001}, {70001}, {70001}}},
       kFloats,
       fused_sgd_case,
       3,
       -2,
       2,
       false},
      {"fused_adam",
       {"fused_adam"},
       {{{3, 5}, {3, 5}, {3, 5}, {3, 5}}, {{70001}, {70001}, {70001}, {70001}}},
       kFloats,
       fused_adam_case,
       3,
       -2,
       2,
       false},
      {"foreach_norm and foreach_clip_by_norm",
       {"foreach_norm", "foreach_clip_by_norm"},
       {{{3, 5}, {7}, {0}}, {{70001}, {131073}, {2, 3}}},
       kFloats,
       foreach_clip_case,
       4,
       -2,
       2,
       false},
  };
}

}  // namespace parity

TEST_SUITE("cuda_amp_scaler") {
  TEST_CASE("cuda parity: AMP unscale, scale update and fused optimizer ops") {
    parity::run_all(parity::cases_amp());
  }

  TEST_CASE("fused SGD/Adam skip on the device: a GradScaler step with inf grads changes nothing") {
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      std::vector<Tensor> ps = {rnd({64, 33}, kFloat32, 1, kCUDA).requires_grad_(),
                                rnd({33}, kFloat32, 2, kCUDA).requires_grad_()};
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0) opt = std::make_unique<optim::SGD>(ps, 0.1, 0.9);
      if (which == 1) opt = std::make_unique<optim::AdamW>(ps, 1e-3);
      amp::GradScaler scaler;
      auto grads = [&](int seed, bool poison) {
        for (size_t i = 0; i < ps.size(); ++i) {
          Tensor g = mul(rnd(ps[i].shape(), kFloat32, 10 + seed + i, kCUDA), scaler.get_scale());
          if (poison && i == 1) g.narrow(0, 3, 1).fill_(NAN);
          ps[i].set_grad(g);
        }
      };
      scaler.scale(ones({}, kFloat32, kCUDA));
      grads(0, false);
      REQUIRE(opt->supports_amp_scaling());
      CHECK(scaler.step(*opt));
      scaler.update();
      const Tensor p0 = ps[0].detach().cpu().clone(), p1 = ps[1].detach().cpu().clone();
      std::map<std::string, Tensor> st;
      for (auto& [k, v] : opt->state_dict()) st[k] = v.cpu().clone();
      scaler.scale(ones({}, kFloat32, kCUDA));
      grads(1, true);
      CHECK_FALSE(scaler.step(*opt));
      scaler.update();
      CHECK(equal(ps[0].detach().cpu(), p0));
      CHECK(equal(ps[1].detach().cpu(), p1));
      for (auto& [k, v] : opt->state_dict()) {
        CAPTURE(k);
        CHECK(equal(v.cpu(), st.at(k)));
      }
      CHECK(scaler.get_scale() == 32768.0);
      CHECK(scaler.skipped_steps() == 1);
    }
  }

  TEST_CASE("the scaler's fused CUDA step equals the unscale + per-tensor CPU step") {
    std::vector<Tensor> gp = {rnd({300, 7}, kFloat32, 3, kCUDA).requires_grad_()};
    std::vector<Tensor> cp = {gp[0].detach().cpu().requires_grad_()};
    optim::Adam gopt(gp, 1e-2), copt(cp, 1e-2);
    amp::GradScaler gs, cs;
    for (int t = 0; t < 4; ++t) {
      gs.scale(ones({}, kFloat32, kCUDA));
      cs.scale(ones({}));
      Tensor g = rnd({300, 7}, kFloat32, 40 + t, kCPU);
      if (t == 2) g.narrow(0, 5, 1).fill_(INFINITY);
      gp[0].set_grad(mul(g, gs.get_scale()).cuda());
      cp[0].set_grad(mul(g, cs.get_scale()));
      CHECK(gs.step(gopt) == cs.step(copt));
      gs.update();
      cs.update();
      testutil::check_close(gp[0].detach().cpu(), cp[0].detach(), 1e-5, 1e-6);
      CHECK(gs.get_scale() == cs.get_scale());
      CHECK(gs.growth_tracker() == cs.growth_tracker());
    }
  }
}
