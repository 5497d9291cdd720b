# Goldens for F::interpolate's bicubic (align_corners false/true), nearest-exact and area modes
# (nn/upsample.cpp), from PyTorch 1.13: outputs and input gradients for sizes and scale factors
# that up- and down-sample, in f64 and f32.
# Run: /usr/bin/python3 tools/golden/interpolate_modes.py  -> tests/data/interpolate_modes.json
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float("%.17g" % v) for v in t.reshape(-1).tolist()]}


configs = []
for mode, acs in (("bicubic", (False, True)), ("nearest-exact", (None,)), ("area", (None,))):
    for ac in acs:
        configs += [(mode, ac, None, 2.0), (mode, ac, [5, 7], None), (mode, ac, None, [1.7, 2.5]),
                    (mode, ac, [2, 3], None), (mode, ac, None, [0.6, 0.5]), (mode, ac, [1, 1], None)]
cases = []
for mode, ac, size, scale in configs:
    for dt in (torch.float64, torch.float32):
        x = torch.randn(2, 3, 4, 5, dtype=dt).requires_grad_()
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
                      "dtype": "f64" if dt == torch.float64 else "f32", "x": enc(x),
                      "grad_out": enc(g), "out": enc(out), "grad_x": enc(x.grad)})

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "interpolate_modes.json")
with open(path, "w") as f:
    json.dump({"interpolate": cases, "torch_version": torch.__version__}, f)
print("wrote", os.path.normpath(path), len(cases), "cases")
