#!/usr/bin/python3
"""Golden values for nn.MultiheadAttention and nn.TransformerEncoderLayer (PyTorch, f64, eval
mode, dropout 0): fixed small weights (state_dict), inputs, outputs, averaged attention weights
and input gradients of sum(out * gout).

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_attention.py
Writes tests/data/golden_attention.json (every tensor is {"shape": [...], "data": [...]}).
Read by tests/test_attention.cpp.
"""
import json
import os

import torch

torch.manual_seed(4321)
DT = torch.float64
B, T, S, E, H = 2, 3, 4, 4, 2


def enc(t):
    t = t.detach()
    if t.dtype == torch.bool:
        data = [1 if v else 0 for v in t.reshape(-1).tolist()]
    else:
        data = [float("%.15g" % v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


def state(m):
    return {k: enc(v) for k, v in m.state_dict().items()}


def mha_cases():
    m = torch.nn.MultiheadAttention(E, H, batch_first=True).to(DT)
    with torch.no_grad():  # non-zero biases so they are exercised
        for p in m.parameters():
            p.uniform_(-0.8, 0.8)
    m.eval()
    q0 = torch.randn(B, T, E, dtype=DT)
    k0 = torch.randn(B, S, E, dtype=DT)
    v0 = torch.randn(B, S, E, dtype=DT)
    gout = torch.randn(B, T, E, dtype=DT)
    kpm = torch.tensor([[False, False, True, False], [False, True, True, False]])
    causal = torch.triu(torch.ones(T, S, dtype=torch.bool), 1)
    fmask = torch.randn(T, S, dtype=DT)
    cases = []
    for name, self_attn, kw in [
        ("plain", False, {}),
        ("self", True, {}),
        ("key_padding", False, {"key_padding_mask": kpm}),
        ("causal_and_padding", False, {"key_padding_mask": kpm, "attn_mask": causal}),
        ("float_mask", False, {"attn_mask": fmask}),
    ]:
        q = q0.clone().requires_grad_()
        if self_attn:
            k = v = q
        else:
            k = k0.clone().requires_grad_()
            v = v0.clone().requires_grad_()
        out, w = m(q, k, v, need_weights=True, **kw)
        (out * gout).sum().backward()
        c = {"name": name, "self": self_attn, "q": enc(q), "out": enc(out), "weights": enc(w),
             "grad_q": enc(q.grad)}
        if not self_attn:
            c.update(k=enc(k), v=enc(v), grad_k=enc(k.grad), grad_v=enc(v.grad))
        for key, val in kw.items():
            c[key] = enc(val)
        cases.append(c)
    return {"state": state(m), "gout": enc(gout), "cases": cases}


def encoder_cases():
    res = []
    for norm_first, act in [(False, "relu"), (True, "gelu")]:
        m = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=6, dropout=0.0,
                                             activation=act, batch_first=True,
                                             norm_first=norm_first).to(DT)
        with torch.no_grad():
            for p in m.parameters():
                p.uniform_(-0.8, 0.8)
        m.eval()
        src = torch.randn(B, T, E, dtype=DT, requires_grad=True)
        gout = torch.randn(B, T, E, dtype=DT)
        kpm = torch.tensor([[False, False, True], [False, False, False]])
        out = m(src, src_key_padding_mask=kpm)
        (out * gout).sum().backward()
        res.append({"norm_first": norm_first, "activation": act, "state": state(m),
                    "src": enc(src), "key_padding_mask": enc(kpm), "gout": enc(gout),
                    "out": enc(out), "grad_src": enc(src.grad)})
    return res


def main():
    data = {"mha": mha_cases(), "encoder": encoder_cases()}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "golden_attention.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
