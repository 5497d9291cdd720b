#!/usr/bin/python3
"""Golden values for layer_norm, batch_norm and cross_entropy, computed with PyTorch in f64.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_norm_loss.py
Writes tests/data/golden_norm_loss.json (inputs and expected outputs; every tensor is
{"shape": [...], "data": [row-major values]}). Read by tests/test_layer_norm.cpp, test_batch_norm.cpp and test_loss.cpp.
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
DT = torch.float64


def enc(t):
    t = t.detach()
    if t.dtype == torch.int64:
        data = [int(v) for v in t.reshape(-1).tolist()]
    else:
        data = [float(repr_round(v)) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


def repr_round(v):
    # 15 significant digits keeps the file small and is far below every test tolerance
    return float("%.15g" % v) if v == v else v


def layer_norm_cases():
    cases = []
    for shape, ns in (([4, 6], [6]), ([2, 3, 4, 5], [4, 5])):
        x = (torch.randn(shape, dtype=DT) * 2 + 0.5).requires_grad_()
        w = torch.randn(ns, dtype=DT).requires_grad_()
        b = torch.randn(ns, dtype=DT).requires_grad_()
        eps = 1e-5
        out = F.layer_norm(x, ns, w, b, eps)
        g = torch.randn(shape, dtype=DT)
        out.backward(g)
        red = list(range(len(shape) - len(ns), len(shape)))
        mean = x.detach().mean(dim=red)
        rstd = 1 / torch.sqrt(x.detach().var(dim=red, unbiased=False) + eps)
        cases.append({"normalized_shape": ns, "eps": eps, "x": enc(x), "w": enc(w), "b": enc(b),
                      "grad_out": enc(g), "out": enc(out), "mean": enc(mean.reshape(-1)),
                      "rstd": enc(rstd.reshape(-1)), "grad_x": enc(x.grad),
                      "grad_w": enc(w.grad), "grad_b": enc(b.grad)})
    return cases


def batch_norm_cases():
    cases = []
    for shape in ([5, 3], [2, 3, 4, 5]):
        for training in (True, False):
            C = shape[1]
            x = (torch.randn(shape, dtype=DT) * 1.5 - 0.3).requires_grad_()
            w = torch.randn(C, dtype=DT).requires_grad_()
            b = torch.randn(C, dtype=DT).requires_grad_()
            rm0 = torch.randn(C, dtype=DT)
            rv0 = torch.rand(C, dtype=DT) + 0.5
            rm, rv = rm0.clone(), rv0.clone()
            momentum, eps = 0.1, 1e-5
            out = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
            g = torch.randn(shape, dtype=DT)
            out.backward(g)
            cases.append({"training": training, "momentum": momentum, "eps": eps, "x": enc(x),
                          "w": enc(w), "b": enc(b), "running_mean": enc(rm0),
                          "running_var": enc(rv0), "grad_out": enc(g), "out": enc(out),
                          "new_running_mean": enc(rm), "new_running_var": enc(rv),
                          "grad_x": enc(x.grad), "grad_w": enc(w.grad), "grad_b": enc(b.grad)})
    return cases


def cross_entropy_cases():
    cases = []
    specs = [
        # (logits shape, reduction, ignore_index, label_smoothing, ignored positions)
        ([6, 5], "none", -100, 0.0, []),
        ([6, 5], "mean", -100, 0.0, []),
        ([6, 5], "sum", -100, 0.0, []),
        ([6, 5], "mean", -100, 0.0, [1, 4]),
        ([6, 5], "none", 3, 0.0, "class3"),
        ([6, 5], "mean", -100, 0.2, [2]),
        ([6, 5], "sum", -100, 0.1, [0]),
        ([6, 5], "none", -100, 0.3, [5]),
        ([2, 4, 3, 2], "none", -100, 0.0, []),
        ([2, 4, 3, 2], "mean", -100, 0.1, [0, 7]),
        ([2, 4, 3, 2], "sum", 1, 0.0, "class1"),
    ]
    for shape, reduction, ignore_index, ls, ignored in specs:
        C = shape[1]
        logits = (torch.randn(shape, dtype=DT) * 2).requires_grad_()
        tshape = [shape[0]] + shape[2:]
        target = torch.randint(0, C, tshape)
        flat = target.view(-1)
        if ignored == "class3" or ignored == "class1":
            pass  # targets equal to ignore_index (a valid class) are ignored
        else:
            for i in ignored:
                flat[i] = ignore_index
        loss = F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=ls)
        g = torch.randn(loss.shape, dtype=DT) if reduction == "none" else torch.tensor(0.7, dtype=DT)
        loss.backward(g)
        cases.append({"reduction": reduction, "ignore_index": ignore_index,
                      "label_smoothing": ls, "logits": enc(logits), "target": enc(target),
                      "grad_loss": enc(g), "loss": enc(loss), "grad_logits": enc(logits.grad)})
    return cases


def main():
    data = {"torch_version": torch.__version__, "layer_norm": layer_norm_cases(),
            "batch_norm": batch_norm_cases(), "cross_entropy": cross_entropy_cases()}
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "tests", "data", "golden_norm_loss.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
