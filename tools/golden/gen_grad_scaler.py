# Golden trajectory for tests/test_grad_scaler.cpp: PyTorch's GradScaler algorithm driving a
# real torch.optim.SGD (momentum) for 30 steps with inf/NaN injected into chosen gradients.
# torch 1.13's GradScaler disables itself without CUDA and has no CPU kernels for
# _amp_update_scale_ / _amp_foreach_non_finite_check_and_unscale_, so both are transcribed
# below from aten/src/ATen/native/cuda/AmpKernels.cu (f32 scale, int32 tracker, inv = 1/scale in
# f64 then f32, growth skipped when the result is inf). Run: /usr/bin/python3 gen_grad_scaler.py
import json
import math
import os

import torch

STEPS = 30
INIT_SCALE, GROWTH, BACKOFF, INTERVAL = 65536.0, 2.0, 0.5, 3
INF_STEPS = {4: "inf", 5: "nan", 11: "inf", 12: "-inf", 13: "nan", 20: "inf"}  # 1-based


def unscale_(grads, found_inf, inv_scale):
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        if inv_scale.item() != 1.0:
            g.mul_(inv_scale)


def update_scale_(scale, tracker, found_inf):
    if found_inf.item() != 0:
        scale.mul_(BACKOFF)  # float(scale * backoff) in the kernel; exact for 0.5
        tracker.fill_(0)
        return
    successful = int(tracker.item()) + 1
    if successful == INTERVAL:
        grown = torch.tensor(float(scale.item()) * GROWTH, dtype=torch.float32)
        if math.isfinite(grown.item()):
            scale.copy_(grown)
        tracker.fill_(0)
    else:
        tracker.fill_(successful)


def main():
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(3, 4, generator=gen)
    b = torch.randn(3, generator=gen)
    raw = [(torch.randn(3, 4, generator=gen), torch.randn(3, generator=gen)) for _ in range(STEPS)]
    params = [w.clone().requires_grad_(), b.clone().requires_grad_()]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    scale = torch.tensor(INIT_SCALE, dtype=torch.float32)
    tracker = torch.tensor(0, dtype=torch.int32)
    out = {"init": {"w": w.flatten().tolist(), "b": b.tolist()},
           "grads": [{"w": gw.flatten().tolist(), "b": gb.tolist()} for gw, gb in raw],
           "inf_steps": {str(k): v for k, v in INF_STEPS.items()},
           "options": {"init_scale": INIT_SCALE, "growth_factor": GROWTH,
                       "backoff_factor": BACKOFF, "growth_interval": INTERVAL,
                       "lr": 0.1, "momentum": 0.9},
           "steps": []}
    for t in range(1, STEPS + 1):
        gw, gb = raw[t - 1]
        params[0].grad = gw * scale  # the scaled gradient backward would produce
        params[1].grad = gb * scale
        if t in INF_STEPS:
            params[0].grad[1, 2] = float(INF_STEPS[t])
        found_inf = torch.tensor(0.0)
        inv = scale.double().reciprocal().float()
        unscale_([p.grad for p in params], found_inf, inv)
        skipped = found_inf.item() != 0
        if not skipped:
            opt.step()
        update_scale_(scale, tracker, found_inf)
        out["steps"].append({"skipped": skipped, "scale": scale.item(),
                             "growth_tracker": int(tracker.item()),
                             "w": params[0].detach().flatten().tolist(),
                             "b": params[1].detach().tolist()})
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "grad_scaler_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
