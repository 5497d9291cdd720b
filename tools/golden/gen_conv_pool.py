#!/usr/bin/python3
"""Golden values for conv2d / max_pool2d / avg_pool2d (forward and backward) from PyTorch.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_conv_pool.py
Writes tests/data/golden_conv_pool.json. Inputs are multiples of 1/32 in [-2, 2) (exact in
f16/bf16/f32/f64) and are stored in the file, so the C++ test needs no RNG; results are computed
in float64 and rounded to 12 significant digits.
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_conv_pool.json")


def rnd(*shape):
    return torch.randint(-64, 64, shape, dtype=torch.float64) / 32.0


def flat(t):
    return [float(f"{v:.12g}") for v in t.detach().reshape(-1).tolist()]


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def conv_case(name, x_shape, w_shape, bias, stride=1, padding=0, dilation=1, groups=1):
    x = rnd(*x_shape).requires_grad_()
    w = rnd(*w_shape).requires_grad_()
    b = rnd(w_shape[0]).requires_grad_() if bias else None
    out = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rnd(*out.shape)
    out.backward(g)
    return {
        "name": name, "x_shape": list(x_shape), "w_shape": list(w_shape),
        "stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation),
        "groups": groups, "x": flat(x), "w": flat(w), "bias": flat(b) if bias else None,
        "out_shape": list(out.shape), "out": flat(out), "grad_out": flat(g),
        "grad_x": flat(x.grad), "grad_w": flat(w.grad), "grad_b": flat(b.grad) if bias else None,
    }


def pool_params(kernel, stride, padding, dilation=1, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    return {"kernel": pair(kernel), "stride": pair(stride), "padding": pair(padding),
            "dilation": pair(dilation), "ceil_mode": ceil_mode,
            "count_include_pad": count_include_pad, "divisor_override": divisor_override or 0}


def max_case(name, x_shape, kernel, stride, padding=0, dilation=1, ceil_mode=False):
    x = rnd(*x_shape).requires_grad_()
    out, idx = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode,
                            return_indices=True)
    g = rnd(*out.shape)
    out.backward(g)
    return {"name": name, "x_shape": list(x_shape),
            "params": pool_params(kernel, stride, padding, dilation, ceil_mode),
            "x": flat(x), "out_shape": list(out.shape), "out": flat(out),
            "indices": idx.reshape(-1).tolist(), "grad_out": flat(g), "grad_x": flat(x.grad)}


def avg_case(name, x_shape, kernel, stride, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    x = rnd(*x_shape).requires_grad_()
    out = F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    g = rnd(*out.shape)
    out.backward(g)
    return {"name": name, "x_shape": list(x_shape),
            "params": pool_params(kernel, stride, padding, 1, ceil_mode, count_include_pad,
                                  divisor_override),
            "x": flat(x), "out_shape": list(out.shape), "out": flat(out), "grad_out": flat(g),
            "grad_x": flat(x.grad)}


def main():
    conv = [
        conv_case("basic 3x3 bias", (2, 3, 7, 6), (4, 3, 3, 3), True),
        conv_case("stride 2 padding 1", (2, 3, 9, 8), (5, 3, 3, 3), True, stride=2, padding=1),
        conv_case("dilation 2 non-square no bias", (1, 2, 10, 9), (3, 2, 3, 2), False,
                  padding=(2, 1), dilation=2),
        conv_case("groups 2 stride (2,1)", (2, 4, 6, 7), (6, 2, 3, 3), True, stride=(2, 1),
                  padding=(1, 0), groups=2),
        conv_case("depthwise multiplier 2", (2, 3, 8, 8), (6, 1, 3, 3), False, padding=1,
                  groups=3),
        conv_case("1x1 bias", (2, 5, 4, 3), (3, 5, 1, 1), True),
        conv_case("1x1 stride 2", (1, 4, 5, 5), (2, 4, 1, 1), False, stride=2),
        conv_case("mixed stride dilation", (1, 2, 5, 11), (2, 2, 2, 3), True, stride=(1, 3),
                  padding=(0, 2), dilation=(2, 1)),
        conv_case("kernel equals input", (3, 2, 4, 5), (3, 2, 4, 5), True),
    ]
    maxp = [
        max_case("k2 s2", (2, 3, 6, 6), 2, 2),
        max_case("k3 s2 p1 ceil", (1, 2, 7, 8), 3, 2, 1, ceil_mode=True),
        max_case("k(3,2) s(2,1) p(1,0) dilation(2,1)", (1, 2, 9, 7), (3, 2), (2, 1), (1, 0),
                 dilation=(2, 1)),
        max_case("ceil drops window in padding", (1, 1, 5, 5), 2, 2, 1, ceil_mode=True),
        max_case("k3 s1 p1", (2, 2, 5, 4), 3, 1, 1),
        max_case("ceil overhang", (1, 2, 6, 7), 3, 2, 0, ceil_mode=True),
    ]
    avgp = [
        avg_case("k3 s2 p1 include pad", (2, 2, 7, 7), 3, 2, 1),
        avg_case("k3 s2 p1 exclude pad", (2, 2, 7, 7), 3, 2, 1, count_include_pad=False),
        avg_case("ceil exclude pad", (1, 2, 6, 8), 3, 2, 1, ceil_mode=True,
                 count_include_pad=False),
        avg_case("ceil include pad k2 s2", (1, 1, 5, 5), 2, 2, 0, ceil_mode=True),
        avg_case("ceil include pad k3 s2 p1", (1, 2, 6, 6), 3, 2, 1, ceil_mode=True),
        avg_case("divisor override", (1, 2, 5, 7), (2, 3), (1, 2), (1, 1), divisor_override=5),
        avg_case("k2 s2", (2, 3, 6, 6), 2, 2),
    ]
    data = {"generator": "tools/golden/gen_conv_pool.py", "torch": torch.__version__,
            "conv2d": conv, "max_pool2d": maxp, "avg_pool2d": avgp}
    with open(OUT, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
