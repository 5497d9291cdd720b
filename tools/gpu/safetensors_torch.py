#!/usr/bin/env python3
"""safetensors both ways between minidl and PyTorch (the GPU pack's step 7; needs torch and
safetensors, as in PyTorch 2.11's venv on the GPU machine).

  safetensors_torch.py HELPER [--device cuda] [--tolerance 1e-4] [--workdir DIR]

HELPER is minidl's build/tools/gpu/safetensors_logits. For the MNIST CNN and a small GPT:
  minidl -> torch: `HELPER export` writes weights + input + minidl's logits; torch loads them
                   with safetensors.torch.load_file into its own copy of the model (strict) and
                   compares its logits with minidl's;
  torch -> minidl: torch writes its seeded model's weights + an input with
                   safetensors.torch.save_file; `HELPER import` computes minidl's logits from them.
Passes when every relative error ||minidl - torch|| / ||torch|| is <= --tolerance (f32, TF32 off).
Prints one line per check and a last line "safetensors_torch: PASS|FAIL max rel err E".
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

PREFIX = "model."
GPT = dict(block=32, vocab=85, layers=2, heads=4, embd=64)  # safetensors_logits' small_gpt()


class MnistNet(nn.Module):
    """apps/mnist/model.h: PyTorch's examples/mnist Net (eval: dropout is the identity)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2).flatten(1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class Attn(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads, self.c_attn, self.c_proj = heads, nn.Linear(c, 3 * c), nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)  # the math path, f32
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = att.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c), Attn(c, heads)
        self.ln_2, self.mlp = nn.LayerNorm(c), Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """apps/gpt/model.h with nanoGPT's names; lm_head tied to wte."""

    def __init__(self):
        super().__init__()
        c = GPT["embd"]
        self.wte, self.wpe = nn.Embedding(GPT["vocab"], c), nn.Embedding(GPT["block"], c)
        self.h = nn.ModuleList([Block(c, GPT["heads"]) for _ in range(GPT["layers"])])
        self.ln_f, self.lm_head = nn.LayerNorm(c), nn.Linear(c, GPT["vocab"], bias=False)
        for name, p in self.named_parameters():  # GPT-2 init, like GPT::init_weights
            if "ln_" in name:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * GPT["layers"]) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


MODELS = {"mnist": MnistNet, "gpt": Gpt}


def make_input(name, device):
    if name == "mnist":
        return torch.randn(8, 1, 28, 28, device=device)
    return torch.randint(0, GPT["vocab"], (3, GPT["block"]), device=device)


def rel_err(mine, ref):
    mine, ref = mine.double().cpu(), ref.double().cpu()
    if mine.shape != ref.shape or not torch.isfinite(mine).all():
        return math.inf
    return ((mine - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def load_weights(model, tensors, device):
    state = {k[len(PREFIX):]: v.to(device) for k, v in tensors.items() if k.startswith(PREFIX)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")


def minidl_to_torch(helper, name, device, workdir):
    path = os.path.join(workdir, f"{name}-from-minidl.safetensors")
    subprocess.run([helper, "export", "--model", name, "--device", device, "--out", path],
                   check=True)
    tensors = load_file(path, device=device)
    model = MODELS[name]().to(device).eval()
    load_weights(model, tensors, device)
    with torch.no_grad():
        return rel_err(tensors["logits"], model(tensors["input"]).float())


def torch_to_minidl(helper, name, device, workdir):
    torch.manual_seed(7)
    model = MODELS[name]().to(device).eval()
    x = make_input(name, device)
    with torch.no_grad():
        ref = model(x).float()
    # clone(): safetensors refuses tensors that share memory (the GPT's tied head).
    tensors = {PREFIX + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    tensors["input"] = x.contiguous()
    src = os.path.join(workdir, f"{name}-from-torch.safetensors")
    out = os.path.join(workdir, f"{name}-logits-minidl.safetensors")
    save_file(tensors, src, metadata={"format": "pt"})
    subprocess.run([helper, "import", "--model", name, "--device", device, "--in", src,
                    "--out", out], check=True)
    return rel_err(load_file(out)["logits"], ref)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("helper", help="path of build/tools/gpu/safetensors_logits")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    # Exact f32 on the GPU: PyTorch lets cuDNN convolutions use TF32 by default.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    workdir = a.workdir or tempfile.mkdtemp(prefix="safetensors-torch-")
    os.makedirs(workdir, exist_ok=True)
    worst, failed = 0.0, False
    for name in MODELS:
        for label, check in (("minidl -> torch", minidl_to_torch),
                             ("torch -> minidl", torch_to_minidl)):
            try:
                err = check(a.helper, name, a.device, workdir)
            except Exception as e:  # noqa: BLE001 - one line per failed check, then go on
                print(f"{name:5s} {label}: ERROR {type(e).__name__}: {e}")
                failed = True
                continue
            ok = err <= a.tolerance
            failed |= not ok
            worst = max(worst, err)
            print(f"{name:5s} {label}: rel err {err:.2e} {'ok' if ok else 'FAIL'}"
                  f" (tolerance {a.tolerance:g}, torch {torch.__version__}, {a.device})")
    print(f"safetensors_torch: {'FAIL' if failed else 'PASS'} max rel err {worst:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
