# Golden values for tests/test_optim.cpp and tests/test_lr_scheduler.cpp from PyTorch (f64):
# optimizer trajectories over 5 steps of fixed synthetic gradients, clip_grad_norm_ totals and
# scheduler lr sequences. Run: /usr/bin/python3 tools/golden/gen_optim.py
import json
import math
import os

import torch

torch.manual_seed(0)
out = {}


def t(x):
    return {"data": x.detach().reshape(-1).tolist(), "shape": list(x.shape)}


p0 = [torch.randn(2, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)]
grads = [[torch.randn_like(p) for p in p0] for _ in range(5)]
out["params"] = [t(p) for p in p0]
out["grads"] = [[t(g) for g in gs] for gs in grads]

configs = {
    "sgd_plain": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_amsgrad_wd": (torch.optim.Adam, dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6,
                                               weight_decay=0.1, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.05)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.03, amsgrad=True)),
}
traj = {}
for name, (cls, kw) in configs.items():
    ps = [p.clone().requires_grad_() for p in p0]
    opt = cls(ps, **kw)
    steps = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        opt.step()
        steps.append([t(p) for p in ps])
    traj[name] = steps
out["trajectories"] = traj

clip = {}
for nt in [2.0, 1.0, 3.0, math.inf]:
    for max_norm in [0.5, 100.0]:
        ps = [p.clone().requires_grad_() for p in p0]
        for p, g in zip(ps, grads[0]):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=nt)
        key = f"{'inf' if math.isinf(nt) else nt}_{max_norm}"
        clip[key] = {"norm_type": -1.0 if math.isinf(nt) else nt, "max_norm": max_norm,
                     "total": float(total), "grads": [t(p.grad) for p in ps]}
out["clip"] = clip


def sched_run(make, opt_cls=torch.optim.SGD, n=30, **okw):
    ps = [torch.zeros(1, requires_grad=True)]
    ps2 = [torch.zeros(1, requires_grad=True)]
    opt = opt_cls([{"params": ps}, {"params": ps2, "lr": 0.5}], lr=0.1, **okw)
    s = make(opt)
    lrs, moms = [], []
    mkey = "betas" if opt_cls is torch.optim.Adam else "momentum"
    for _ in range(n):
        lrs.append([g["lr"] for g in opt.param_groups])
        m = [g[mkey] for g in opt.param_groups]
        moms.append([x[0] if isinstance(x, tuple) else x for x in m])
        opt.step()
        s.step()
    return {"lr": lrs, "momentum": moms}


S = torch.optim.lr_scheduler
sch = {
    "step": sched_run(lambda o: S.StepLR(o, step_size=4, gamma=0.5)),
    "multistep": sched_run(lambda o: S.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3)),
    "exponential": sched_run(lambda o: S.ExponentialLR(o, gamma=0.9)),
    "cosine": sched_run(lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), n=35),
    "linear": sched_run(lambda o: S.LinearLR(o)),
    "linear2": sched_run(lambda o: S.LinearLR(o, start_factor=0.5, end_factor=0.1, total_iters=8)),
    "onecycle_sgd": sched_run(lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=30), momentum=0.9),
    "onecycle_adam": sched_run(lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=30),
                               opt_cls=torch.optim.Adam),
    "sequential": sched_run(lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.2, total_iters=4), S.CosineAnnealingLR(o, T_max=12),
            S.StepLR(o, step_size=3, gamma=0.5)], milestones=[5, 17])),
    "chained": sched_run(lambda o: S.ChainedScheduler(
        [S.ExponentialLR(o, gamma=0.95), S.MultiStepLR(o, milestones=[10, 20], gamma=0.5)])),
}
out["schedulers"] = sch

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_optim.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, os.path.getsize(path), "bytes")
