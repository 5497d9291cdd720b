#!/usr/bin/python3
"""Golden values for conv_transpose2d and conv1d (forward, input/weight/bias gradients) and the
ConvTranspose2d / Conv1d modules (weight shapes, state_dict keys, repr) from PyTorch.

Run with Debian's torch:  /usr/bin/python3 tools/golden/golden_conv_extra.py
Writes tests/data/golden_conv_extra.json. Inputs are multiples of 1/32 in [-2, 2) and are stored
in the file; results are computed in float64 and rounded to 12 significant digits.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(4321)
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_conv_extra.json")


def rnd(*shape):
    return torch.randint(-64, 64, shape, dtype=torch.float64) / 32.0


def flat(t):
    return [float(f"{v:.12g}") for v in t.detach().reshape(-1).tolist()]


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def transpose_case(name, x_shape, w_shape, bias, stride=1, padding=0, output_padding=0,
                   groups=1, dilation=1):
    x = rnd(*x_shape).requires_grad_()
    w = rnd(*w_shape).requires_grad_()
    b = rnd(w_shape[1] * groups).requires_grad_() if bias else None
    out = F.conv_transpose2d(x, w, b, stride=stride, padding=padding,
                             output_padding=output_padding, groups=groups, dilation=dilation)
    g = rnd(*out.shape)
    out.backward(g)
    return {
        "name": name, "x_shape": list(x_shape), "w_shape": list(w_shape),
        "stride": pair(stride), "padding": pair(padding), "output_padding": pair(output_padding),
        "dilation": pair(dilation), "groups": groups, "x": flat(x), "w": flat(w),
        "bias": flat(b) if bias else None, "out_shape": list(out.shape), "out": flat(out),
        "grad_out": flat(g), "grad_x": flat(x.grad), "grad_w": flat(w.grad),
        "grad_b": flat(b.grad) if bias else None,
    }


def conv1d_case(name, x_shape, w_shape, bias, stride=1, padding=0, dilation=1, groups=1):
    x = rnd(*x_shape).requires_grad_()
    w = rnd(*w_shape).requires_grad_()
    b = rnd(w_shape[0]).requires_grad_() if bias else None
    out = F.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rnd(*out.shape)
    out.backward(g)
    return {
        "name": name, "x_shape": list(x_shape), "w_shape": list(w_shape), "stride": stride,
        "padding": padding, "dilation": dilation, "groups": groups, "x": flat(x), "w": flat(w),
        "bias": flat(b) if bias else None, "out_shape": list(out.shape), "out": flat(out),
        "grad_out": flat(g), "grad_x": flat(x.grad), "grad_w": flat(w.grad),
        "grad_b": flat(b.grad) if bias else None,
    }


def module_info(m):
    return {"repr": repr(m),
            "state": {k: list(v.shape) for k, v in m.state_dict().items()}}


transpose = [
    transpose_case("basic", (2, 4, 5, 5), (4, 3, 3, 3), True),
    transpose_case("stride2_pad1_outpad1", (2, 4, 4, 3), (4, 2, 3, 3), True, stride=2, padding=1,
                   output_padding=1),
    transpose_case("groups2", (1, 4, 3, 4), (4, 3, 3, 2), True, stride=(2, 1), padding=(0, 1),
                   groups=2),
    transpose_case("dilation2_outpad1", (1, 2, 4, 4), (2, 3, 3, 3), False, dilation=2,
                   output_padding=1),
    transpose_case("mixed", (2, 4, 3, 3), (4, 1, 4, 3), True, stride=3, padding=(2, 1),
                   output_padding=(2, 1), groups=2, dilation=(1, 2)),
    transpose_case("unbatched", (2, 3, 2), (2, 2, 2, 2), True, stride=2),
    transpose_case("pad1_dilation2_outpad1", (2, 2, 3, 4), (2, 2, 3, 3), True, padding=1,
                   dilation=2, output_padding=(1, 0)),
]
conv1d = [
    conv1d_case("pad1", (2, 4, 9), (6, 4, 3), True, padding=1),
    conv1d_case("stride2_dil2_groups2", (2, 4, 11), (6, 2, 3), False, stride=2, padding=2,
                dilation=2, groups=2),
    conv1d_case("unbatched", (3, 7), (2, 3, 2), True, stride=3),
]
modules = {
    "ct_default": module_info(nn.ConvTranspose2d(2, 8, 3)),
    "ct_full": module_info(nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1,
                                              groups=2, bias=False, dilation=(2, 1))),
    "c1_default": module_info(nn.Conv1d(4, 8, 3)),
    "c1_full": module_info(nn.Conv1d(4, 6, 5, stride=2, padding=1, dilation=2, groups=2,
                                     bias=False)),
}

with open(OUT, "w") as f:
    json.dump({"torch": torch.__version__, "conv_transpose2d": transpose, "conv1d": conv1d,
               "modules": modules}, f)
print("wrote", os.path.normpath(OUT))
