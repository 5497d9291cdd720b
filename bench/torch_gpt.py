#!/usr/bin/env python3
"""The gpt app's recipe in PyTorch 1.13 (the reference for bench/gpt_train.sh): the same bytes,
vocabulary, 90/10 split, GPT-2 style model (biases, tied head, N(0,0.02) init with scaled residual
projections), AdamW (betas 0.9/0.99, weight decay 0.1 on 2-D weights), warm-up + cosine schedule,
clipping 1.0, evaluation every --eval-interval iterations as the mean of --eval-iters batches.
Prints one line: val loss, train loss, tokens/s and ms/step (training steps only)."""
import argparse, math, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--data", default="data/moby-dick/data.txt")
p.add_argument("--max-iters", type=int, default=2000)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--amp", choices=["off", "bf16"], default="off")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--block-size", type=int, default=64)
p.add_argument("--batch-size", type=int, default=12)
p.add_argument("--n-layer", type=int, default=4)
p.add_argument("--n-head", type=int, default=4)
p.add_argument("--n-embd", type=int, default=128)
p.add_argument("--eval-interval", type=int, default=250)
p.add_argument("--eval-iters", type=int, default=20)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)

text = open(a.data, "rb").read()
vocab = sorted(set(text))
stoi = {b: i for i, b in enumerate(vocab)}
ids = torch.tensor([stoi[b] for b in text], dtype=torch.long)
n = int(len(ids) * 0.9)
train_data, val_data = ids[:n], ids[n:]
T, B = a.block_size, a.batch_size


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - T, (B,))
    return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + T + 1] for i in ix])


class Block(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.H = H
        s.ln_1, s.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.c_attn, s.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.c_fc, s.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(s, x):
        Bx, Tx, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(Bx, Tx, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~s.mask[:Tx, :Tx], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, C)
        x = x + s.attn_proj(y)
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, V, C, H, L):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        s.ln_f = nn.LayerNorm(C)
        s.lm_head = nn.Linear(C, V, bias=False)
        s.wte.weight = s.lm_head.weight
        for name, prm in s.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(prm)
            elif "ln_" in name:
                nn.init.ones_(prm)
            elif name.endswith("proj.weight"):
                nn.init.normal_(prm, 0.0, 0.02 / math.sqrt(2 * L))
            else:
                nn.init.normal_(prm, 0.0, 0.02)

    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.size(1)))
        for blk in s.h:
            x = blk(x)
        return s.lm_head(s.ln_f(x))


model = GPT(len(vocab), a.n_embd, a.n_head, a.n_layer)
decay = [q for q in model.parameters() if q.dim() >= 2]
no_decay = [q for q in model.parameters() if q.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))
lr, min_lr, warm, decay_iters = 1e-3, 1e-4, 100, a.max_iters


def lr_at(it):
    if it < warm:
        return lr * (it + 1) / (warm + 1)
    if it > decay_iters:
        return min_lr
    r = (it - warm) / (decay_iters - warm)
    return min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (lr - min_lr)


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16")


def loss_of(x, y):
    with autocast():
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))


@torch.no_grad()
def estimate():
    model.eval()
    out = [sum(loss_of(*get_batch(s)).item() for _ in range(a.eval_iters)) / a.eval_iters
           for s in ("train", "val")]
    model.train()
    return out


train_s = 0.0
for it in range(a.max_iters):
    if it % a.eval_interval == 0 and it > 0:
        tl, vl = estimate()
        print(f"iter {it}: train loss {tl:.4f}, val loss {vl:.4f}", flush=True)
    for g in opt.param_groups:
        g["lr"] = lr_at(it)
    t0 = time.perf_counter()
    x, y = get_batch("train")
    loss = loss_of(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    loss.item()
    train_s += time.perf_counter() - t0
tl, vl = estimate()
steps = max(1, a.max_iters)
print(f"torch_gpt: val loss {vl:.4f}, train loss {tl:.4f} after {a.max_iters} iterations; "
      f"{B * T * steps / max(train_s, 1e-9):.0f} tokens/s, step {1e3 * train_s / steps:.1f} ms "
      f"({a.amp}, {a.threads} threads)")
