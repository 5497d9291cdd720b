# Goldens for F::interpolate on 3-D inputs [N,C,L] (nearest, nearest-exact, linear with
# align_corners false/true, area) and 5-D inputs [N,C,D,H,W] (nearest, nearest-exact, trilinear
# with align_corners false/true, area) (nn/upsample.cpp), from PyTorch 1.13: outputs and input
# gradients for sizes and scale factors that up- and down-sample, in f64 and f32.
# Run: /usr/bin/python3 tools/golden/interpolate_nd.py  -> tests/data/interpolate_nd.json
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float("%.17g" % v) if t.dtype == torch.float64 else float("%.9g" % v) for v in t.reshape(-1).tolist()]}


configs = []  # (input shape, mode, align_corners, size, scale)
for mode, acs in (("nearest", (None,)), ("nearest-exact", (None,)), ("linear", (False, True)),
                  ("area", (None,))):
    for ac in acs:
        configs += [((2, 3, 5), mode, ac, None, 2.0), ((2, 3, 5), mode, ac, [9], None),
                    ((2, 3, 5), mode, ac, None, [1.7]), ((2, 3, 7), mode, ac, [3], None),
                    ((2, 3, 7), mode, ac, None, 0.6), ((2, 3, 4), mode, ac, [1], None)]
for mode, acs in (("nearest", (None,)), ("nearest-exact", (None,)), ("trilinear", (False, True)),
                  ("area", (None,))):
    for ac in acs:
        configs += [((1, 2, 2, 3, 4), mode, ac, None, 2.0),
                    ((1, 2, 3, 4, 5), mode, ac, [4, 6, 3], None),
                    ((1, 1, 3, 4, 5), mode, ac, None, [1.5, 0.75, 1.3]),
                    ((1, 2, 5, 3, 4), mode, ac, [2, 1, 7], None)]
cases = []
for shape, mode, ac, size, scale in configs:
    for dt in (torch.float64, torch.float32):
        x = torch.randn(*shape, dtype=dt).requires_grad_()
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
        cases.append({"mode": mode, "align_corners": ac, "size": size,
                      "scale": scale if isinstance(scale, list) or scale is None else [scale],
                      "dtype": "f64" if dt == torch.float64 else "f32", "x": enc(x),
                      "grad_out": enc(g), "out": enc(out), "grad_x": enc(x.grad)})

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "interpolate_nd.json")
with open(path, "w") as f:
    json.dump({"interpolate": cases, "torch_version": torch.__version__}, f)
print("wrote", os.path.normpath(path), len(cases), "cases")
