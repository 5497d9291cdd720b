#!/usr/bin/python3
"""Golden values for nn::TransformerBlock: a nanoGPT-style pre-norm block (ln_1, attn.c_attn,
attn.c_proj, ln_2, mlp.c_fc, GELU(tanh), mlp.c_proj; causal attention written out, as torch
1.13 has no F.scaled_dot_product_attention), eval mode, dropout 0. Fixed weights drawn here
(rounded to 15 significant digits, so both sides use exactly the stored values), an input x,
an output weight gout; records out = block(x) and the gradients of sum(out * gout) w.r.t. x
and every parameter, in f64 and f32, with bias=True and bias=False.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_transformer_block.py
Writes tests/data/golden_transformer_block.json (tensors are {"shape": [...], "data": [...]}).
Read by tests/test_transformer_nn.cpp.
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2024)
B, T, C, H = 2, 5, 8, 2


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = nn.Linear(C, C, bias=bias)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~causal, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.ln_1 = LayerNorm(C, bias)
        self.attn = CausalSelfAttention(bias)
        self.ln_2 = LayerNorm(C, bias)
        self.mlp = MLP(bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def rounded(t):
    return torch.tensor([float("%.15g" % v) for v in t.reshape(-1).tolist()],
                        dtype=torch.float64).reshape(t.shape)


def enc(t):
    t = t.detach().double()
    return {"shape": list(t.shape), "data": [float("%.17g" % v) for v in t.reshape(-1).tolist()]}


def case(bias):
    m = Block(bias).double()
    with torch.no_grad():  # non-trivial norm weights and biases so all are exercised
        for name, p in m.named_parameters():
            lo, hi = (0.5, 1.5) if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                else (-0.5, 0.5)
            p.copy_(rounded(torch.empty_like(p).uniform_(lo, hi)))
    x0 = rounded(torch.randn(B, T, C, dtype=torch.float64))
    gout = rounded(torch.randn(B, T, C, dtype=torch.float64))
    out = {"state": {k: enc(v) for k, v in m.state_dict().items()}, "x": enc(x0),
           "gout": enc(gout)}
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        mm = Block(bias).to(dt)
        mm.load_state_dict({k: v.to(dt) for k, v in m.state_dict().items()})
        mm.eval()
        x = x0.detach().to(dt).clone().requires_grad_()
        y = mm(x)
        (y * gout.to(dt)).sum().backward()
        out[tag] = {"out": enc(y), "grad_x": enc(x.grad),
                    "grads": {k: enc(p.grad) for k, p in mm.named_parameters()}}
    return out


data = {"config": {"B": B, "T": T, "C": C, "H": H}, "bias": case(True), "no_bias": case(False)}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                    "golden_transformer_block.json")
with open(path, "w") as f:
    json.dump(data, f)
print("wrote", os.path.normpath(path))
