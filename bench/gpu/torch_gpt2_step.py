#!/usr/bin/env python3
# PyTorch twin of `gpt --preset gpt2-124m --data synthetic --amp bf16` (apps/gpt): GPT-2 124M
# (12 x 768, 12 heads, 1024 positions, 50257 tokens padded to 50304, tied head, GPT-2 init),
# causal SDPA, bf16 autocast, fused AdamW over the app's two weight-decay groups, clipping 1.0,
# the loss over the real 50257 logits, seeded uniform tokens on the GPU (or the CPU: --device
# cpu); eager or --compile. Prints one JSON line: tokens/s, ms/step, MFU (llm.c: 6N + 6LCT per
# token; GPU only), peak memory (GPU: allocated; CPU: the process's peak RSS).
# Usage: python3 bench/gpu/torch_gpt2_step.py [--batch-size 12] [--block-size 1024] [--steps 20]
#        [--warmup 5] [--compile] [--peak-flops 989e12] [--device cpu --threads 2]
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, PADDED_VOCAB, MAX_T, N_LAYER, N_HEAD, N_EMBD = 50257, 50304, 1024, 12, 12, 768
LLMC_PARAMS = 124_475_904  # llm.c's count: padded wte, wpe, the blocks, ln_f; tied head once


class Block(nn.Module):  # pre-norm: x + attn(ln_1(x)), then x + mlp(ln_2(x)); nanoGPT's names
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.attn_proj = nn.Linear(N_EMBD, N_EMBD)
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.mlp_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):  # idx:[B,T] -> logits [B,T,50257] (the padded columns sliced off)
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, N_EMBD)
        self.wpe = nn.Embedding(MAX_T, N_EMBD)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, PADDED_VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one tensor
        proj_std = 0.02 / math.sqrt(2 * N_LAYER)  # GPT-2 init, as GPT::init_weights
        for name, p in self.named_parameters():
            if name.startswith("ln_") or ".ln_" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))[..., :VOCAB]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=12, help="sequences per step (gpt's default)")
    ap.add_argument("--block-size", type=int, default=1024,
                    help="tokens per sequence T <= 1024 (the model keeps 1024 positions; gpt "
                         "--seq-len)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--peak-flops", type=float, default=989e12,
                    help="dense bf16 peak FLOP/s (H100/H200 SXM: 989e12)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="CPU: torch.set_num_threads (0: keep)")
    ap.add_argument("--amp", choices=["bf16", "off"], default="bf16",
                    help="bf16 autocast (default) or f32 throughout (bench_gpt_variants --amp)")
    args = ap.parse_args()
    if not 1 <= args.block_size <= MAX_T:
        ap.error(f"--block-size must be in [1, {MAX_T}], got {args.block_size}")
    cuda = args.device == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False  # minidl's default (the matmuls run in bf16)
    model = GPT().to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == LLMC_PARAMS, f"{n_params} parameters, llm.c counts {LLMC_PARAMS}"
    # The app's AdamW: betas (0.9, 0.99), weight decay 0.1 on the 2-D weights only.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.99), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.compile else model
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    B, T = args.batch_size, args.block_size

    def step():
        ids = torch.randint(0, VOCAB, (B, T + 1), device=dev, generator=gen)
        x, y = ids[:, :T], ids[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            logits = fwd(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        losses.append(step())
    sync()
    seconds = time.perf_counter() - t0
    ms = seconds * 1e3 / args.steps
    tokens_per_s = B * T * args.steps / seconds
    flops_per_token = 6 * n_params + 6 * N_LAYER * N_EMBD * T  # llm.c's gpt2_estimate_mfu
    print(json.dumps(dict(
        bench="gpt2_124m_step", impl=f"torch {torch.__version__}",
        mode="compile" if args.compile else "eager", amp=args.amp, batch=B, seq_len=T, params=n_params,
        ms_per_step=round(ms, 2), tokens_per_s=round(tokens_per_s),
        mfu=round(tokens_per_s * flops_per_token / args.peak_flops, 4) if cuda else None,
        peak_mib=round((torch.cuda.max_memory_allocated() if cuda else
                        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**20, 1),
        mean_loss=round(torch.stack(losses).mean().item(), 4), steps=args.steps,
        warmup=args.warmup,
        device=torch.cuda.get_device_name(dev) if cuda else f"cpu, {torch.get_num_threads()} threads")),
        flush=True)


if __name__ == "__main__":
    main()
