#!/usr/bin/python3
"""A GPT-2 in Hugging Face's layout, built with PyTorch: the golden GPT's weights
(tests/data/golden_gpt.json, from gen_gpt.py) in a GPT2LMHeadModel-style module whose attention
and MLP projections are HF's Conv1D (weight [in, out], y = x @ W + b), saved under HF's names
("transformer.h.N.attn.c_attn.weight", the causal-mask buffer "transformer.h.N.attn.bias", the
tied "lm_head.weight") as tests/data/gpt_hf_tiny.safetensors; its f32 logits on the golden batch
and its greedy continuation of a prompt go to tests/data/golden_gpt_hf.json. Read by
tests/test_gpt_hf.cpp.

Run: ../shared/tools/torch2 tools/golden/gen_gpt_hf.py   (or any python3 with torch)
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G = json.load(open(os.path.join(ROOT, "tests", "data", "golden_gpt.json")))
CFG = G["config"]
V, BLOCK, C, H, L = (CFG[k] for k in ("vocab_size", "block_size", "n_embd", "n_head", "n_layer"))


def tensor(o):
    return torch.tensor(o["data"], dtype=torch.float32).view(o["shape"])


class Conv1D(nn.Module):  # HF's: weight [nx, nf]
    def __init__(s, nx, nf):
        super().__init__()
        s.weight, s.bias = nn.Parameter(torch.empty(nx, nf)), nn.Parameter(torch.empty(nf))

    def forward(s, x):
        out = torch.addmm(s.bias, x.reshape(-1, x.size(-1)), s.weight)
        return out.view(x.shape[:-1] + (s.weight.size(1),))


class Attention(nn.Module):
    def __init__(s):
        super().__init__()
        s.c_attn, s.c_proj = Conv1D(C, 3 * C), Conv1D(C, C)
        s.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK, dtype=torch.bool))
                          .view(1, 1, BLOCK, BLOCK))

    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
        att = att.masked_fill(~s.bias[:, :, :t, :t], float("-inf")).softmax(-1)
        return s.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(s):
        super().__init__()
        s.c_fc, s.c_proj = Conv1D(C, 4 * C), Conv1D(4 * C, C)

    def forward(s, x):
        return s.c_proj(F.gelu(s.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.attn, s.ln_2, s.mlp = nn.LayerNorm(C), Attention(), nn.LayerNorm(C), MLP()

    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class Transformer(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(BLOCK, C)
        s.h = nn.ModuleList([Block() for _ in range(L)])
        s.ln_f = nn.LayerNorm(C)


class GPT2LMHead(nn.Module):
    def __init__(s):
        super().__init__()
        s.transformer = Transformer()
        s.lm_head = nn.Linear(C, V, bias=False)
        s.lm_head.weight = s.transformer.wte.weight

    def forward(s, idx):
        t = s.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.size(1)))
        for blk in t.h:
            x = blk(x)
        return s.lm_head(t.ln_f(x))


model = GPT2LMHead()
with torch.no_grad():
    for name, o in G["state_dict"].items():
        if name == "lm_head.weight":
            continue  # tied to wte
        w = tensor(o)
        if name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            w = w.t().contiguous()  # Linear [out, in] -> Conv1D [in, out]
        model.get_parameter("transformer." + name).copy_(w)

x = torch.tensor(G["x"]["data"], dtype=torch.int64).view(G["x"]["shape"])
with torch.no_grad():
    logits = model(x)
    prompt = x[:1, :3]
    seq = prompt
    for _ in range(4):  # greedy: the argmax of the last position's logits
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)

# model.safetensors as HF writes it (the tied head listed under its own name as well).
DT = {torch.float32: "F32", torch.bool: "BOOL"}
state = {k: v.contiguous() for k, v in model.state_dict().items()}
header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
for k in sorted(state):
    raw = state[k].numpy().tobytes()
    header[k] = {"dtype": DT[state[k].dtype], "shape": list(state[k].shape),
                 "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
hb = json.dumps(header, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
with open(os.path.join(ROOT, "tests", "data", "gpt_hf_tiny.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
with open(os.path.join(ROOT, "tests", "data", "golden_gpt_hf.json"), "w") as f:
    json.dump({"torch": torch.__version__, "names": sorted(state),
               "logits": {"shape": list(logits.shape),
                          "data": [float("%.9g" % v) for v in logits.reshape(-1).tolist()]},
               "prompt": prompt.reshape(-1).tolist(), "greedy": seq.reshape(-1).tolist()}, f)
print("wrote gpt_hf_tiny.safetensors (%d tensors) and golden_gpt_hf.json; greedy %s" %
      (len(state), seq.reshape(-1).tolist()))
