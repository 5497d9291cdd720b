#!/usr/bin/python3
"""Golden values for nn.TransformerEncoder, nn.TransformerDecoderLayer and nn.TransformerDecoder
(PyTorch, f64, eval mode, dropout 0, batch_first=True): fixed small weights (state_dict), inputs,
masks, outputs and input gradients of sum(out * gout).

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_transformer_stack.py
Writes tests/data/golden_transformer_stack.json (every tensor is {"shape": [...], "data": [...]}).
Read by tests/test_transformer_stack.cpp.
"""
import json
import os

import torch

torch.manual_seed(2024)
DT = torch.float64
B, T, S, E, H, FF = 2, 3, 4, 4, 2, 6


def enc(t):
    t = t.detach()
    if t.dtype == torch.bool:
        data = [1 if v else 0 for v in t.reshape(-1).tolist()]
    else:
        data = [float("%.15g" % v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


def randomize(m):
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.8, 0.8)
    m.eval()
    return m


def state(m):
    return {k: enc(v) for k, v in m.state_dict().items()}


def encoder_cases():
    res = []
    for norm_first, final_norm in [(False, True), (True, False)]:
        layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, dropout=0.0,
                                                 batch_first=True, norm_first=norm_first)
        norm = torch.nn.LayerNorm(E) if final_norm else None
        m = randomize(torch.nn.TransformerEncoder(layer, 2, norm=norm,
                                                  enable_nested_tensor=False).to(DT))
        src = torch.randn(B, T, E, dtype=DT, requires_grad=True)
        gout = torch.randn(B, T, E, dtype=DT)
        kpm = torch.tensor([[False, False, True], [False, False, False]])
        out = m(src, src_key_padding_mask=kpm)
        (out * gout).sum().backward()
        res.append({"norm_first": norm_first, "final_norm": final_norm, "state": state(m),
                    "src": enc(src), "key_padding_mask": enc(kpm), "gout": enc(gout),
                    "out": enc(out), "grad_src": enc(src.grad)})
    return res


def decoder_cases():
    res = []
    for norm_first, act, final_norm in [(False, "relu", True), (True, "gelu", False)]:
        layer = torch.nn.TransformerDecoderLayer(E, H, dim_feedforward=FF, dropout=0.0,
                                                 activation=act, batch_first=True,
                                                 norm_first=norm_first)
        norm = torch.nn.LayerNorm(E) if final_norm else None
        m = randomize(torch.nn.TransformerDecoder(layer, 2, norm=norm).to(DT))
        tgt = torch.randn(B, T, E, dtype=DT, requires_grad=True)
        memory = torch.randn(B, S, E, dtype=DT, requires_grad=True)
        gout = torch.randn(B, T, E, dtype=DT)
        tgt_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        mkpm = torch.tensor([[False, False, False, True], [False, False, False, False]])
        out = m(tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=mkpm)
        (out * gout).sum().backward()
        res.append({"norm_first": norm_first, "activation": act, "final_norm": final_norm,
                    "state": state(m), "tgt": enc(tgt), "memory": enc(memory),
                    "tgt_mask": enc(tgt_mask), "memory_key_padding_mask": enc(mkpm),
                    "gout": enc(gout), "out": enc(out), "grad_tgt": enc(tgt.grad),
                    "grad_memory": enc(memory.grad)})
    return res


def main():
    data = {"encoder": encoder_cases(), "decoder": decoder_cases()}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "golden_transformer_stack.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
