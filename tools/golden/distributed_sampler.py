# Goldens for data/sampler.cpp: torch.randperm with seeded generators and the index lists of
# torch.utils.data.DistributedSampler for padding, drop_last, shuffle and epoch cases.
# Run: /usr/bin/python3 tools/golden/distributed_sampler.py  -> tests/data/distributed_sampler.json
import json
import os

import torch
from torch.utils.data import DistributedSampler

randperm = []
for n, seed in [(0, 0), (1, 5), (2, 0), (10, 0), (10, 1), (10, 2**32 + 1), (37, 123),
                (100, 2**40 + 7), (1000, 42), (5, 2**64 - 1)]:
    g = torch.Generator().manual_seed(seed)
    randperm.append({"n": n, "seed": seed, "perm": torch.randperm(n, generator=g).tolist()})

dist = []
cases = [
    # (n, world, shuffle, drop_last, seed)
    (10, 3, True, False, 0),    # remainder: pad 2 from the front
    (10, 3, True, True, 0),     # remainder: drop the tail
    (12, 4, True, False, 7),    # n % world == 0
    (12, 4, False, True, 7),
    (3, 5, True, False, 1),     # n < world: padding cycles
    (2, 7, False, False, 0),    # padding cycles several times
    (3, 5, True, True, 1),      # n < world with drop_last: nothing left
    (17, 2, False, False, 0),   # no shuffle
    (101, 8, True, False, 2**33 + 5),
    (0, 3, True, False, 0),
    (1, 1, True, False, 3),
]
for n, world, shuffle, drop_last, seed in cases:
    for epoch in (0, 1):
        for rank in range(world):
            s = DistributedSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=shuffle,
                                   seed=seed, drop_last=drop_last)
            s.set_epoch(epoch)
            dist.append({"n": n, "world": world, "rank": rank, "epoch": epoch, "shuffle": shuffle,
                         "drop_last": drop_last, "seed": seed, "num_samples": len(s),
                         "indices": list(iter(s))})

out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                   "distributed_sampler.json")
with open(out, "w") as f:
    json.dump({"torch_version": torch.__version__, "randperm": randperm, "distributed": dist}, f)
print("wrote", os.path.normpath(out), len(randperm), "randperm and", len(dist), "sampler cases")
