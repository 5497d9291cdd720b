#!/usr/bin/env python3
# Formats the JSON lines of bench_cuda_step, bench_cuda_kernels and torch_mnist_step.py into one
# markdown table: metric, minidl, reference (PyTorch / cuBLASLt / copy bandwidth), ratio, target.
# ratio > 1 always means minidl is better (faster, less memory, more bandwidth).
# Usage: make_table.py [--device D] [--driver V] [--date T] [--command C]... FILE.jsonl...
import argparse
import json
import sys


def load(paths):
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError:
                            print(f"make_table: skipping bad line in {path}: {line[:80]}",
                                  file=sys.stderr)
        except OSError as e:
            print(f"make_table: {e}", file=sys.stderr)
    return rows


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    return f"{v:.3f}{unit}" if abs(v) < 10 else f"{v:.1f}{unit}"


class Table:
    def __init__(self):
        self.lines = ["| metric | minidl | reference | ratio | target | met |",
                      "|---|---|---|---|---|---|"]

    def add(self, metric, mine, ref, ref_name, unit, higher_better, target):
        ratio = None
        if mine is not None and ref is not None and mine > 0 and ref > 0:
            ratio = mine / ref if higher_better else ref / mine
        met = "n/a" if ratio is None else ("yes" if ratio >= target else "no")
        self.lines.append(f"| {metric} | {fmt(mine, unit)} | {fmt(ref, unit)} ({ref_name}) | "
                          f"{fmt(ratio)} | ≥ {target:g} | {met} |")


def build(rows):
    t = Table()
    step = {}
    for r in rows:
        if r.get("bench") == "mnist_step":
            who = "minidl" if r["impl"] == "minidl" else "torch"
            step[(who, r["mode"], r["batch"])] = r
    torch_name = next((r["impl"] for r in rows if r.get("impl", "").startswith("torch")),
                      "torch")
    for batch in sorted({k[2] for k in step}):
        for mode in ("eager", "cuda_graph"):
            m, p = step.get(("minidl", mode, batch)), step.get(("torch", mode, batch))
            get = lambda r, k: r[k] if r else None  # noqa: E731
            t.add(f"MNIST step, batch {batch}, {mode} (ms/step)", get(m, "ms_per_step"),
                  get(p, "ms_per_step"), torch_name, " ms", False, 1.0)
            t.add(f"MNIST step, batch {batch}, {mode} (peak GPU MiB)", get(m, "peak_mib"),
                  get(p, "peak_mib"), torch_name, " MiB", False, 1.0)
        e, g = step.get(("minidl", "eager", batch)), step.get(("minidl", "cuda_graph", batch))
        if e and g:
            t.add(f"MNIST step, batch {batch}: --cuda-graph vs eager (ms/step)",
                  g["ms_per_step"], e["ms_per_step"], "minidl eager", " ms", False, 1.0)

    torch_gemm = {(r["M"], r["N"], r["K"]): r for r in rows
                  if r.get("bench") == "gemm" and r.get("impl", "").startswith("torch")}
    for r in rows:
        if r.get("bench") != "gemm" or "minidl_ms" not in r:
            continue
        shape = f"[{r['M']},{r['K']}]x[{r['K']},{r['N']}]"
        t.add(f"GEMM {r['dtype']} {shape} (TFLOP/s; rel err {r['max_rel_err']:.1e})",
              r["minidl_tflops"], r["ref_tflops"], "raw cuBLASLt", "", True, 0.95)
        p = torch_gemm.get((r["M"], r["N"], r["K"]))
        t.add(f"GEMM {r['dtype']} {shape} (TFLOP/s)", r["minidl_tflops"],
              p["tflops"] if p else None, torch_name, "", True, 0.95)

    sdpa = {(r["impl"] if r["impl"].startswith("minidl") else "torch"): r for r in rows
            if r.get("bench") == "sdpa"}
    if "minidl" in sdpa:
        m, p = sdpa["minidl"], sdpa.get("torch")
        shape = f"[{m['B']},{m['H']},{m['T']},{m['hd']}] bf16 causal"
        for key, what in (("fwd_ms", "forward"), ("fwd_bwd_ms", "forward + backward")):
            t.add(f"SDPA {shape}, {what} (ms)", m[key], p[key] if p else None,
                  p["impl"] if p else torch_name, " ms", False, 1.0)
        w = sdpa.get("minidl_wmma")
        if w:
            t.add(f"SDPA {shape}, forward: flash (mma.sync) vs MINIDL_UNFUSED=flash_attention "
                  "(WMMA) (ms)", m["fwd_ms"], w["fwd_ms"], "minidl WMMA", " ms", False, 1.0)
        ld32 = sdpa.get("minidl_flash_ld32")
        if ld32:
            for key, what in (("fwd_ms", "forward"), ("fwd_bwd_ms", "forward + backward")):
                t.add(f"SDPA {shape}, {what}: ldmatrix vs MINIDL_UNFUSED=flash_ldmatrix (ms)",
                      m[key], ld32[key], "minidl 32-bit loads", " ms", False, 1.0)

    cls = {("minidl" if r["impl"] == "minidl" else "torch"): r for r in rows
           if r.get("bench") == "classifier_loss"}
    if "minidl" in cls:
        m, p = cls["minidl"], cls.get("torch")
        shape = f"[{m['N']},{m['Vp']}] bf16, loss over {m['V']}"
        t.add(f"classifier + loss {shape}, forward + backward (ms)", m["fused_ms"],
              p["ms"] if p else None, p["impl"] if p else torch_name, " ms", False, 1.0)
        t.add(f"classifier + loss {shape}: fused vs MINIDL_UNFUSED=classifier_loss (ms)",
              m["fused_ms"], m["unfused_ms"], "minidl unfused", " ms", False, 1.0)

    g2 = {("minidl" if r["impl"] == "minidl" else "torch"): r for r in rows
          if r.get("bench") == "gpt2_rows"}
    if "minidl" in g2:
        m, p = g2["minidl"], g2.get("torch")
        for key, what in (("ln_fwd_ms", "LayerNorm [12288,768] bf16 -> f32, forward (ms)"),
                          ("ln_fwd_bwd_ms", "LayerNorm [12288,768] bf16 -> f32, forward + backward (ms)"),
                          ("adamw_ms", f"fused AdamW step, GPT-2 124M ({m['adamw_params']} params, "
                                       f"{m['adamw_tensors']} tensors) (ms)")):
            t.add(what, m[key], p[key] if p else None, p["impl"] if p else torch_name, " ms",
                  False, 1.0)
        if "res_ln_ms" in m:
            what = ("residual add + LayerNorm [12288,768] (f32 stream + bf16 branch -> bf16 "
                    "rows), forward + backward")
            t.add(f"{what} (ms)", m["res_ln_ms"], p.get("res_ln_ms") if p else None,
                  p["impl"] if p else torch_name, " ms", False, 1.0)
            t.add(f"{what}: fused vs MINIDL_UNFUSED=residual_layer_norm (ms)", m["res_ln_ms"],
                  m["res_ln_unfused_ms"], "minidl unfused", " ms", False, 1.0)

    torch_bw = {r["kernel"]: r for r in rows
                if r.get("bench") == "membw" and r.get("impl", "").startswith("torch")}
    for r in rows:
        if r.get("bench") != "membw":
            continue
        if "minidl_gbps" not in r:  # the copy bandwidth line itself
            if "gbps" in r and not r.get("impl"):
                t.add("cudaMemcpy device-to-device (GB/s, read + write)", r["gbps"],
                      torch_bw.get("copy_", {}).get("gbps"), f"{torch_name} copy_", "", True,
                      0.95)
            continue
        name = f"{r['kernel']} {r['dtype']} {r['shape']} (GB/s)"
        t.add(name, r["minidl_gbps"], r["ref_gbps"], "cudaMemcpy D2D", "", True, 0.8)
        p = torch_bw.get(r["kernel"])
        t.add(name, r["minidl_gbps"], p["gbps"] if p else None, torch_name, "", True, 1.0)
    return t.lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="unknown")
    ap.add_argument("--driver", default="unknown")
    ap.add_argument("--date", default="unknown")
    ap.add_argument("--command", action="append", default=[])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    rows = load(args.files)
    out = [f"# minidl GPU benchmarks, {args.date}", "",
           f"- device: {args.device}, driver {args.driver}"]
    out += [f"- command: `{c}`" for c in args.command]
    out += ["- ratio > 1 means minidl is better (time and memory: reference / minidl; "
            "throughput: minidl / reference)", ""]
    out += build(rows)
    print("\n".join(out))


if __name__ == "__main__":
    main()
