# Goldens for nn::utils::rnn::pad_sequence (nn/padding.cpp), from PyTorch >= 2.6 (padding_side
# arrived in 2.6): forward values and the gradient of sum(out * w) for each sequence, in f64.
# Run: ../shared/tools/torch2 tools/golden/pad_sequence.py  -> tests/data/pad_sequence.json
import json
import os

import torch
from torch.nn.utils.rnn import pad_sequence

cases = []
for lengths, tail, batch_first, value, side, seed in [
        ([3, 1, 4], [], False, 0.0, "right", 0), ([3, 1, 4], [], True, -1.5, "left", 1),
        ([2, 5], [3], True, 0.0, "right", 2), ([2, 5, 0], [3], False, 7.0, "left", 3),
        ([4, 4], [2, 2], True, 0.25, "right", 4), ([1], [2], False, 0.0, "left", 5)]:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randn([n] + tail, generator=g, dtype=torch.float64).requires_grad_()
            for n in lengths]
    out = pad_sequence(seqs, batch_first=batch_first, padding_value=value, padding_side=side)
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (out * w).sum().backward()
    cases.append({"lengths": lengths, "tail": tail, "batch_first": batch_first, "value": value,
                  "side": side, "inputs": [s.detach().flatten().tolist() for s in seqs],
                  "out_shape": list(out.shape), "out": out.detach().flatten().tolist(),
                  "w": w.flatten().tolist(), "grads": [s.grad.flatten().tolist() for s in seqs]})

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "pad_sequence.json")
with open(path, "w") as f:
    json.dump({"pad_sequence": cases, "torch_version": torch.__version__}, f)
print("wrote", os.path.normpath(path))
