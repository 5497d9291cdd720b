#!/usr/bin/python3
"""Golden values for the extra layers and utilities, computed with PyTorch 1.13 in f64.

Run with Debian's torch:  /usr/bin/python3 tools/golden/golden_layers_extra.py
Writes tests/data/golden_layers_extra.json (every tensor is {"shape": [...], "data": [...]}):
forward outputs and input/parameter gradients of leaky_relu, prelu, hardswish, group_norm,
interpolate (nearest/bilinear x align_corners, scale and size), pad (constant/reflect/replicate/
circular, negative pads); ReduceLROnPlateau lr trajectories; AveragedModel (SWA and EMA) values; update_bn.
Read by tests/test_layers_extra.cpp and tests/test_plateau_swa.cpp.
"""
import copy
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.optim.swa_utils import AveragedModel, update_bn

torch.manual_seed(4321)
DT = torch.float64


def enc(t):
    t = t.detach()
    if t.dtype in (torch.int64, torch.int32):
        data = [int(v) for v in t.reshape(-1).tolist()]
    else:
        data = [float("%.17g" % v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


def leaf(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=DT) * scale).requires_grad_()


def grads_of(out, *ins):
    g = torch.randn(out.shape, dtype=DT)
    out.backward(g)
    return g, [i.grad for i in ins]


def activations():
    cases = {"leaky_relu": [], "prelu": [], "hardswish": []}
    for slope in (0.01, 0.2, -0.5):
        x = leaf(3, 4)
        with torch.no_grad():
            x[0, 0] = 0.0
        out = F.leaky_relu(x, slope)
        g, (gx,) = grads_of(out, x)
        cases["leaky_relu"].append({"slope": slope, "x": enc(x), "grad_out": enc(g),
                                    "out": enc(out), "grad_x": enc(gx)})
    for shape, n in (([2, 3, 4], 1), ([2, 3, 4], 3), ([2, 3, 2, 2], 3), ([5], 1), ([4, 3], 3)):
        x = leaf(*shape)
        with torch.no_grad():
            x.view(-1)[1] = 0.0
        w = (torch.rand(n, dtype=DT) * 0.5).requires_grad_()
        out = F.prelu(x, w)
        g, (gx, gw) = grads_of(out, x, w)
        cases["prelu"].append({"x": enc(x), "w": enc(w), "grad_out": enc(g), "out": enc(out),
                               "grad_x": enc(gx), "grad_w": enc(gw)})
    x = (torch.randn(4, 6, dtype=DT) * 3)
    with torch.no_grad():
        x.view(-1)[:5] = torch.tensor([-3.0, 3.0, 0.0, -4.0, 4.5], dtype=DT)
    x.requires_grad_()
    out = F.hardswish(x)
    g, (gx,) = grads_of(out, x)
    cases["hardswish"].append({"x": enc(x), "grad_out": enc(g), "out": enc(out),
                               "grad_x": enc(gx)})
    return cases


def group_norms():
    cases = []
    for shape, groups, affine in (([2, 6, 3, 4], 1, True), ([2, 6, 3, 4], 2, True),
                                  ([2, 6, 3, 4], 6, True), ([3, 4, 5], 2, True),
                                  ([2, 6, 3, 4], 3, False), ([4, 6], 3, True)):
        C = shape[1]
        x = (torch.randn(*shape, dtype=DT) * 2 + 0.5).requires_grad_()
        w = (torch.randn(C, dtype=DT)).requires_grad_()
        b = (torch.randn(C, dtype=DT)).requires_grad_()
        eps = 1e-5
        out = F.group_norm(x, groups, w if affine else None, b if affine else None, eps)
        ins = (x, w, b) if affine else (x,)
        g, gs = grads_of(out, *ins)
        c = {"groups": groups, "affine": affine, "eps": eps, "x": enc(x), "w": enc(w),
             "b": enc(b), "grad_out": enc(g), "out": enc(out), "grad_x": enc(gs[0])}
        if affine:
            c["grad_w"] = enc(gs[1])
            c["grad_b"] = enc(gs[2])
        cases.append(c)
    return cases


def interpolations():
    cases = []
    configs = []
    for mode, acs in (("nearest", (None,)), ("bilinear", (False, True))):
        for ac in acs:
            configs += [(mode, ac, None, 2.0), (mode, ac, [5, 7], None),
                        (mode, ac, None, [1.7, 2.5]), (mode, ac, [2, 3], None)]
    for mode, ac, size, scale in configs:
        for dt in (DT, torch.float32):
            x = torch.randn(2, 3, 3, 4, dtype=dt).requires_grad_()
            kw = {"mode": mode}
            if ac is not None:
                kw["align_corners"] = ac
            if size is not None:
                kw["size"] = size
            else:
                kw["scale_factor"] = scale
            out = F.interpolate(x, **kw)
            g = torch.randn(out.shape, dtype=dt)
            out.backward(g)
            cases.append({"mode": mode, "align_corners": ac, "size": size, "scale": scale,
                          "dtype": "f64" if dt == DT else "f32", "x": enc(x),
                          "grad_out": enc(g), "out": enc(out), "grad_x": enc(x.grad)})
    return cases


def pads():
    cases = []
    configs = [([2, 3, 4, 5], [1, 2], "constant", None),
               ([2, 3, 4, 5], [1, 2, 0, 3], "constant", 1.5),
               ([2, 3, 4, 5], [-1, 2, 1, -2, 1, 0], "constant", -0.5),
               ([2, 3, 4, 5], [0, 0, 0, 0, 0, 0, 1, 1], "constant", None),
               ([2, 3], [-3, 1], "constant", None),
               ([2, 3, 4, 5], [1, 2, 3, 1], "reflect", None),
               ([2, 3, 4, 5], [-1, 2, 1, -2], "reflect", None),
               ([2, 3, 5], [4, 2], "reflect", None),
               ([3, 5], [2, 3], "reflect", None),
               ([3, 4, 5], [1, 1, 3, 0], "reflect", None),
               ([1, 2, 3, 4, 5], [1, 1, 2, 1, 2, 2], "reflect", None),
               ([2, 3, 4, 5], [2, 3, 1, 4], "replicate", None),
               ([2, 3, 4, 5], [-1, 2, 1, -1], "replicate", None),
               ([2, 3, 5], [3, 0], "replicate", None),
               ([2, 2, 3, 4, 5], [1, 0, 0, 2, 1, 1], "replicate", None)]
    for shape, p, mode, value in configs:
        x = torch.randn(*shape, dtype=DT).requires_grad_()
        out = F.pad(x, p, mode=mode, value=value) if value is not None else F.pad(x, p, mode=mode)
        g = torch.randn(out.shape, dtype=DT)
        out.backward(g)
        cases.append({"pad": p, "mode": mode, "value": value, "x": enc(x), "grad_out": enc(g),
                      "out": enc(out), "grad_x": enc(x.grad)})
    return cases


def pad_circulars():
    # circular (PyTorch 1.13: batched inputs only; minidl also takes [C,...] as torch 2.x does):
    # pads up to the dim's size, negative pads crop first and the pads wrap the kept part.
    cases = []
    configs = [([2, 3, 5], [2, 1]), ([1, 2, 5], [5, 0]), ([1, 1, 5], [-1, 2]),
               ([1, 1, 5], [3, -2]), ([2, 3, 4, 5], [1, 2, 3, 1]), ([2, 3, 4, 5], [-1, 2, 1, -2]),
               ([1, 2, 3, 4, 5], [1, 1, 2, 1, 2, 3])]
    for shape, p in configs:
        x = torch.randn(*shape, dtype=DT).requires_grad_()
        out = F.pad(x, p, mode="circular")
        g = torch.randn(out.shape, dtype=DT)
        out.backward(g)
        cases.append({"pad": p, "mode": "circular", "value": None, "x": enc(x), "grad_out": enc(g),
                      "out": enc(out), "grad_x": enc(x.grad)})
    return cases


def plateaus():
    cases = []
    metrics = [1.0, 0.9, 0.95, 0.95, 0.9, 0.89995, 0.97, 0.96, 0.96, 0.8, 0.85, 0.85, 0.85,
               0.85, 0.85, 0.85, 0.79, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    configs = [dict(mode="min"),
               dict(mode="min", patience=2),
               dict(mode="min", patience=1, cooldown=2, factor=0.5),
               dict(mode="min", patience=1, threshold=0.01, threshold_mode="abs", factor=0.3),
               dict(mode="max", patience=1, factor=0.5),
               dict(mode="max", patience=0, cooldown=1, threshold=0.05, threshold_mode="abs"),
               dict(mode="min", patience=0, factor=0.5, min_lr=[0.02, 0.01]),
               dict(mode="min", patience=0, factor=0.9, eps=0.006)]
    for cfg in configs:
        p1 = torch.zeros(2, requires_grad=True)
        p2 = torch.zeros(3, requires_grad=True)
        opt = torch.optim.SGD([{"params": [p1]}, {"params": [p2], "lr": 0.05}], lr=0.1)
        sched = ReduceLROnPlateau(opt, **cfg)
        traj = []
        for m in metrics:
            sched.step(m)
            traj.append({"lr": [g["lr"] for g in opt.param_groups], "best": sched.best,
                         "num_bad_epochs": sched.num_bad_epochs,
                         "cooldown_counter": sched.cooldown_counter,
                         "last_epoch": sched.last_epoch})
        full = {"mode": "min", "factor": 0.1, "patience": 10, "threshold": 1e-4,
                "threshold_mode": "rel", "cooldown": 0, "min_lr": 0, "eps": 1e-8}
        full.update(cfg)
        cases.append({"config": full, "metrics": metrics, "trajectory": traj})
    return cases


def averaged_models():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).double()
    states = []
    init = {k: enc(v) for k, v in model.state_dict().items()}
    for _ in range(4):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
            model[1].running_mean.add_(torch.randn(2, dtype=DT))
            model[1].running_var.mul_(1.5)
            model[1].num_batches_tracked.add_(3)
        states.append({k: enc(v) for k, v in model.state_dict().items()})
    decay = 0.9

    def ema(avg, cur, n):
        return decay * avg + (1 - decay) * cur

    out = {"init": init, "updates": states, "decay": decay, "results": []}
    for name, fn, use_buffers in (("swa", None, False), ("ema", ema, False),
                                  ("ema_buffers", ema, True), ("swa_buffers", None, True)):
        model.load_state_dict({k: torch.tensor(v["data"], dtype=DT).reshape(v["shape"]).to(
            model.state_dict()[k].dtype) for k, v in init.items()})
        avg = AveragedModel(model, avg_fn=fn, use_buffers=use_buffers)
        after = []
        for st in states:
            model.load_state_dict({k: torch.tensor(v["data"], dtype=DT).reshape(v["shape"]).to(
                model.state_dict()[k].dtype) for k, v in st.items()})
            avg.update_parameters(model)
            after.append({k: enc(v) for k, v in avg.state_dict().items()})
        out["results"].append({"name": name, "use_buffers": use_buffers, "after": after})
    return out


def update_bns():
    # Two BatchNorm layers (momentum 0.1 and 0.3) with stale statistics, the model in eval mode;
    # three (input, target) batches of 5, 5 and 3 rows: update_bn averages per batch.
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2),
                          nn.BatchNorm1d(2, momentum=0.3)).double()
    with torch.no_grad():
        for bn in (model[1], model[4]):
            bn.running_mean.add_(torch.randn_like(bn.running_mean))
            bn.running_var.mul_(2.5)
            bn.num_batches_tracked.add_(7)
            bn.weight.add_(torch.randn_like(bn.weight) * 0.2)
            bn.bias.add_(torch.randn_like(bn.bias) * 0.2)
    model.eval()
    init = {k: enc(v) for k, v in model.state_dict().items()}
    batches = [(torch.randn(n, 3, dtype=DT) * 2 + 0.5, torch.zeros(n, dtype=torch.int64))
               for n in (5, 5, 3)]
    update_bn(batches, model)
    assert not model.training and model[1].momentum == 0.1 and model[4].momentum == 0.3
    return {"init": init, "batches": [enc(x) for x, _ in batches],
            "after": {k: enc(v) for k, v in model.state_dict().items()}}


def main():
    data = {"activations": activations(), "group_norm": group_norms(),
            "interpolate": interpolations(), "pad": pads(), "plateau": plateaus(),
            "averaged_model": averaged_models(), "update_bn": update_bns(),
            "torch_version": torch.__version__}
    data["pad"] += pad_circulars()  # drawn last: the other cases' random inputs stay as they were
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "golden_layers_extra.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
