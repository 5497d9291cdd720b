#!/usr/bin/python3
"""Golden values for the gpt app's model (apps/gpt/model.h) in PyTorch, f64: a 2-layer GPT
with the same parameter names (wte, wpe, h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2,
h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f, lm_head tied to wte), its logits, loss and every parameter
gradient for one batch, and a 20-step AdamW trajectory (weight decay 0.1 on 2-D weights, betas
0.9/0.99, warm-up + cosine schedule, gradient clipping 1.0).

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_gpt.py
Writes tests/data/golden_gpt.json. Read by tests/test_gpt_golden.cpp.
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2024)
DT = torch.float64
V, BLOCK, C, H, L = 11, 8, 16, 2, 2
B, T = 2, 7  # T < block: positions 0..6


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float("%.17g" % v) for v in t.reshape(-1).tolist()]}


class Attn(nn.Module):
    def __init__(s):
        super().__init__()
        s.c_attn, s.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return s.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(s):
        super().__init__()
        s.c_fc, s.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        return s.c_proj(F.gelu(s.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.attn, s.ln_2, s.mlp = nn.LayerNorm(C), Attn(), nn.LayerNorm(C), MLP()

    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(BLOCK, C)
        s.h = nn.ModuleList([Block() for _ in range(L)])
        s.ln_f = nn.LayerNorm(C)
        s.lm_head = nn.Linear(C, V, bias=False)
        s.lm_head.weight = s.wte.weight
        with torch.no_grad():  # non-trivial values everywhere (LayerNorm weights and biases too)
            for p in s.parameters():
                p.normal_(0.0, 0.3)

    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.size(1)))
        for blk in s.h:
            x = blk(x)
        return s.lm_head(s.ln_f(x))


def loss_of(m, x, y):
    logits = m(x)
    return logits, F.cross_entropy(logits.view(-1, V), y.view(-1))


model = GPT().to(DT)
state = {k: enc(v) for k, v in model.state_dict().items()}
x = torch.randint(0, V, (B, T))
y = torch.randint(0, V, (B, T))
logits, loss = loss_of(model, x, y)
loss.backward()
grads = {n: enc(p.grad) for n, p in model.named_parameters()}

# Trajectory: 20 AdamW steps on fixed batches.
LR, MIN_LR, WARM, DECAY, STEPS = 1e-2, 1e-3, 5, 20, 20


def lr_at(it):
    if it < WARM:
        return LR * (it + 1) / (WARM + 1)
    if it > DECAY:
        return MIN_LR
    r = (it - WARM) / (DECAY - WARM)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * r)) * (LR - MIN_LR)


model.zero_grad(set_to_none=True)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.99))
xs = torch.randint(0, V, (STEPS, B, T))
ys = torch.randint(0, V, (STEPS, B, T))
losses, norms = [], []
for it in range(STEPS):
    for g in opt.param_groups:
        g["lr"] = lr_at(it)
    opt.zero_grad(set_to_none=True)
    _, l = loss_of(model, xs[it], ys[it])
    l.backward()
    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
    opt.step()
    losses.append(float(l))

out = {
    "config": {"vocab_size": V, "block_size": BLOCK, "n_embd": C, "n_head": H, "n_layer": L},
    "state_dict": state, "x": enc(x), "y": enc(y), "logits": enc(logits), "loss": float(loss),
    "grads": grads,
    "trajectory": {"lr": LR, "min_lr": MIN_LR, "warmup": WARM, "decay": DECAY,
                   "xs": enc(xs), "ys": enc(ys), "losses": losses, "grad_norms": norms,
                   "final_state": {k: enc(v) for k, v in model.state_dict().items()}},
}
path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_gpt.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", os.path.normpath(path))
