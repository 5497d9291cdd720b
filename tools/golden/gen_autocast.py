#!/usr/bin/python3
"""Golden output dtypes under CPU autocast (torch.autocast('cpu', dtype=torch.bfloat16)).

Run with Debian's torch 1.13:  /usr/bin/python3 tools/golden/gen_autocast.py
Writes tests/data/autocast_cpu_golden.json, read by tests/test_autocast.cpp. Each case is one
frontend called with floating inputs of the listed dtypes (shapes fixed per op, mirrored in the
test) and the dtype of its (first floating) output, or "error" when torch rejects the call.
Cases: all-f32 inputs (shows the lower / fp32 policy), all-bf16 inputs (tells an fp32 policy
from none), f64 inputs of lower ops (autocast never casts float64) and a few mixed-dtype calls
(promote, and ordinary type promotion for unlisted ops).

torch 1.13 raises "Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype" for
torch.autocast('cpu', dtype=torch.float16), so there is no fp16 CPU table here: later torch
(2.1+) accepts fp16 on CPU with a dtype-independent policy, and the test checks the fp16 CPU
column as this table with bfloat16 read as float16.
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)
F32, BF16, F64 = torch.float32, torch.bfloat16, torch.float64
NAMES = {F32: "float32", BF16: "bfloat16", F64: "float64", torch.float16: "float16",
         torch.int64: "int64", torch.bool: "bool"}


def r(*shape):
    return lambda dt: torch.rand(*shape, dtype=F32).add(0.5).to(dt)


def idx(high, *shape):
    return torch.randint(0, high, shape)


# op name -> (number of floating inputs, fn(list of tensors) -> tensor); inputs are made by the
# shape makers in SHAPES (the same shapes as in tests/test_autocast.cpp).
def sdpa(q, k, v):  # torch 1.13 has no F.scaled_dot_product_attention: minidl's composite
    return torch.matmul(torch.softmax(torch.matmul(q * 0.5, k.transpose(-2, -1)), -1), v)


OPS = {
    # unary
    "neg": ([r(4, 4)], lambda a: torch.neg(a)),
    "abs": ([r(4, 4)], lambda a: torch.abs(a)),
    "exp": ([r(4, 4)], lambda a: torch.exp(a)),
    "log": ([r(4, 4)], lambda a: torch.log(a)),
    "log1p": ([r(4, 4)], lambda a: torch.log1p(a)),
    "sqrt": ([r(4, 4)], lambda a: torch.sqrt(a)),
    "rsqrt": ([r(4, 4)], lambda a: torch.rsqrt(a)),
    "sin": ([r(4, 4)], lambda a: torch.sin(a)),
    "cos": ([r(4, 4)], lambda a: torch.cos(a)),
    "tanh": ([r(4, 4)], lambda a: torch.tanh(a)),
    "sigmoid": ([r(4, 4)], lambda a: torch.sigmoid(a)),
    "relu": ([r(4, 4)], lambda a: torch.relu(a)),
    "gelu": ([r(4, 4)], lambda a: F.gelu(a)),
    "silu": ([r(4, 4)], lambda a: F.silu(a)),
    "erf": ([r(4, 4)], lambda a: torch.erf(a)),
    "clamp": ([r(4, 4)], lambda a: torch.clamp(a, 0.6, 1.2)),
    "square": ([r(4, 4)], lambda a: torch.square(a)),
    # binary
    "add": ([r(4, 4), r(4, 4)], lambda a, b: torch.add(a, b)),
    "sub": ([r(4, 4), r(4, 4)], lambda a, b: torch.sub(a, b)),
    "mul": ([r(4, 4), r(4, 4)], lambda a, b: torch.mul(a, b)),
    "div": ([r(4, 4), r(4, 4)], lambda a, b: torch.div(a, b)),
    "pow": ([r(4, 4), r(4, 4)], lambda a, b: torch.pow(a, b)),
    "pow_scalar": ([r(4, 4)], lambda a: torch.pow(a, 2.0)),
    "maximum": ([r(4, 4), r(4, 4)], lambda a, b: torch.maximum(a, b)),
    "minimum": ([r(4, 4), r(4, 4)], lambda a, b: torch.minimum(a, b)),
    "where": ([r(4, 4), r(4, 4)], lambda a, b: torch.where(a > 1.0, a, b)),
    # reductions
    "sum": ([r(4, 4)], lambda a: torch.sum(a)),
    "mean": ([r(4, 4)], lambda a: torch.mean(a)),
    "var": ([r(4, 4)], lambda a: torch.var(a)),
    "std": ([r(4, 4)], lambda a: torch.std(a)),
    "amax": ([r(4, 4)], lambda a: torch.amax(a, 1)),
    "amin": ([r(4, 4)], lambda a: torch.amin(a, 1)),
    "max_dim": ([r(4, 4)], lambda a: torch.max(a, 1)[0]),
    "logsumexp": ([r(4, 4)], lambda a: torch.logsumexp(a, [1])),
    "softmax": ([r(4, 4)], lambda a: torch.softmax(a, -1)),
    "log_softmax": ([r(4, 4)], lambda a: torch.log_softmax(a, -1)),
    # linear algebra, conv, pooling
    "matmul": ([r(2, 3, 4), r(4, 5)], lambda a, b: torch.matmul(a, b)),
    "mm": ([r(3, 4), r(4, 5)], lambda a, b: torch.mm(a, b)),
    "bmm": ([r(2, 3, 4), r(2, 4, 5)], lambda a, b: torch.bmm(a, b)),
    "linear": ([r(3, 4), r(5, 4), r(5)], lambda x, w, b: F.linear(x, w, b)),
    "conv2d": ([r(1, 2, 5, 5), r(3, 2, 3, 3), r(3)], lambda x, w, b: F.conv2d(x, w, b)),
    "max_pool2d": ([r(1, 2, 4, 4)], lambda x: F.max_pool2d(x, 2)),
    "avg_pool2d": ([r(1, 2, 4, 4)], lambda x: F.avg_pool2d(x, 2)),
    "adaptive_avg_pool2d": ([r(1, 2, 5, 5)], lambda x: F.adaptive_avg_pool2d(x, 2)),
    "scaled_dot_product_attention": ([r(2, 3, 4), r(2, 5, 4), r(2, 5, 4)], sdpa),
    # normalisation
    "layer_norm": ([r(3, 4), r(4), r(4)], lambda x, w, b: F.layer_norm(x, [4], w, b)),
    "batch_norm": ([r(3, 4), r(4), r(4)],
                   lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
    # losses (targets are int64 / same-dtype floats as the input)
    "cross_entropy": ([r(3, 5)], lambda x: F.cross_entropy(x, idx(5, 3))),
    "nll_loss": ([r(3, 5)], lambda x: F.nll_loss(x, idx(5, 3))),
    "mse_loss": ([r(3, 4), r(3, 4)], lambda x, y: F.mse_loss(x, y)),
    "binary_cross_entropy_with_logits": (
        [r(3, 4), r(3, 4)], lambda x, y: F.binary_cross_entropy_with_logits(x, y)),
    # indexing and joining
    "embedding": ([r(6, 3)], lambda w: F.embedding(idx(6, 4), w)),
    "index_select": ([r(4, 4)], lambda a: torch.index_select(a, 0, idx(4, 3))),
    "gather": ([r(4, 4)], lambda a: torch.gather(a, 1, idx(4, 4, 2))),
    "scatter_add": ([r(4, 4), r(4, 4)],
                    lambda a, s: torch.scatter_add(a, 1, idx(4, 4, 4), s)),
    "topk": ([r(4, 4)], lambda a: torch.topk(a, 2)[0]),
    "cat": ([r(2, 3), r(2, 3)], lambda a, b: torch.cat([a, b])),
    "stack": ([r(2, 3), r(2, 3)], lambda a, b: torch.stack([a, b])),
    "dropout_eval": ([r(4, 4)], lambda a: F.dropout(a, 0.5, training=False)),
}

# Mixed-dtype calls: (op, input dtypes).
MIXED = [
    ("cat", [BF16, F32]), ("stack", [BF16, F32]), ("cat", [F32, F64]),
    ("add", [BF16, F32]), ("mul", [BF16, F32]), ("where", [BF16, F32]),
    ("mm", [F32, BF16]), ("matmul", [BF16, F32]), ("linear", [BF16, F32, F32]),
    ("conv2d", [BF16, F32, F32]), ("mse_loss", [BF16, F32]),
    ("binary_cross_entropy_with_logits", [BF16, F32]), ("scatter_add", [F32, BF16]),
    ("layer_norm", [BF16, F32, F32]), ("mm", [F64, F64]), ("linear", [F64, F64, F64]),
]


def run(op, dtypes):
    makers, fn = OPS[op]
    torch.manual_seed(1)
    args = [m(dt) for m, dt in zip(makers, dtypes)]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(*args)
        return NAMES[out.dtype]
    except RuntimeError:
        return "error"


def main():
    cases = []
    for op, (makers, _) in OPS.items():
        for dt in (F32, BF16):
            dts = [dt] * len(makers)
            cases.append({"op": op, "inputs": [NAMES[d] for d in dts], "out": run(op, dts)})
    for op, dts in MIXED:
        cases.append({"op": op, "inputs": [NAMES[d] for d in dts], "out": run(op, dts)})
    # Outside autocast, mixed-dtype mm is an error (checked by the test as well).
    a, b = torch.rand(3, 4), torch.rand(4, 5, dtype=BF16)
    try:
        torch.mm(a, b)
        outside = "ok"
    except RuntimeError:
        outside = "error"
    doc = {"torch_version": torch.__version__, "device": "cpu", "autocast_dtype": "bfloat16",
           "outside_autocast_mixed_mm": outside, "cases": cases}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "autocast_cpu_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")
    print("wrote", os.path.normpath(path), len(cases), "cases")


if __name__ == "__main__":
    main()
