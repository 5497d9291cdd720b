#!/usr/bin/env python3
"""KV-cache generation with a GPT-2 style model in PyTorch eager (the reference for
bench/gpt_generate.sh): batch 1, a prompt of --prompt-len tokens, then --new-tokens tokens, each
step feeding one token and reusing the cached keys and values (what `gpt sample` does), sampling
with temperature 0.8 from the full softmax. Random N(0, 0.02) weights: speed only. Prints one line
with tokens/s (the new tokens over the generation's wall time, prompt included)."""
import argparse, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--n-layer", type=int, default=12)
p.add_argument("--n-head", type=int, default=12)
p.add_argument("--n-embd", type=int, default=768)
p.add_argument("--vocab", type=int, default=50304)
p.add_argument("--block-size", type=int, default=1024)
p.add_argument("--prompt-len", type=int, default=16)
p.add_argument("--new-tokens", type=int, default=200)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=3)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
C, H = a.n_embd, a.n_head


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.c_attn, s.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.c_fc, s.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x, cache):
        B, T, _ = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, 2)
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and T > 1)
        x = x + s.c_proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))
        return x, (k, v)


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(a.vocab, C), nn.Embedding(a.block_size, C)
        s.h = nn.ModuleList(Block() for _ in range(a.n_layer))
        s.ln_f = nn.LayerNorm(C)
        for prm in s.parameters():
            nn.init.normal_(prm, std=0.02) if prm.dim() > 1 else nn.init.zeros_(prm)

    def forward(s, idx, pos0, caches):
        T = idx.shape[1]
        x = s.wte(idx) + s.wpe(torch.arange(pos0, pos0 + T))
        new = []
        for blk, c in zip(s.h, caches):
            x, kv = blk(x, c)
            new.append(kv)
        return F.linear(s.ln_f(x[:, -1:]), s.wte.weight), new


model = GPT().eval()
times = []
with torch.inference_mode():
    for _ in range(a.rounds):
        idx = torch.randint(0, a.vocab, (1, a.prompt_len))
        t0 = time.perf_counter()
        logits, caches = model(idx, 0, [None] * a.n_layer)
        pos = a.prompt_len
        for _ in range(a.new_tokens):
            probs = F.softmax(logits[:, -1] / 0.8, -1)
            nxt = torch.multinomial(probs, 1)
            logits, caches = model(nxt, pos, caches)
            pos += 1
        times.append(time.perf_counter() - t0)
best = sorted(times)[len(times) // 2]
print("torch %s: %d layers x %d, vocab %d: %d new tokens after %d in %.3f s (median of %d): "
      "%.1f tokens/s, %d thread(s)" % (torch.__version__, a.n_layer, C, a.vocab, a.new_tokens,
                                       a.prompt_len, best, a.rounds, a.new_tokens / best, a.threads))
