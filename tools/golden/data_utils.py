# Goldens for data/dataset_utils.cpp and the extra samplers of data/sampler.cpp, from PyTorch 1.13:
# random_split with counts and fractions (torch.Generator().manual_seed(seed)), the orders of
# SubsetRandomSampler and WeightedRandomSampler with seeded generators, and BatchSampler over
# Sequential and seeded Random samplers.
# Run: /usr/bin/python3 tools/golden/data_utils.py  -> tests/data/data_utils.json
import json
import os
import warnings

import torch
from torch.utils.data import (BatchSampler, RandomSampler, SequentialSampler, SubsetRandomSampler,
                              WeightedRandomSampler, random_split)

splits = []
for n, lengths, seed in [(10, [3, 7], 0), (10, [7, 3], 42), (13, [0.8, 0.2], 1),
                         (10, [0.3, 0.3, 0.4], 5), (7, [0.5, 0.5], 2**33 + 3),
                         (3, [0.1, 0.1, 0.8], 9), (5, [5, 0], 4), (0, [0, 0], 0)]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a zero-length split warns
        parts = random_split(list(range(n)), lengths, generator=torch.Generator().manual_seed(seed))
    splits.append({"n": n, "lengths": lengths, "seed": seed,
                   "subsets": [list(p.indices) for p in parts]})

subset_random = []
for indices, seed in [([5, 3, 9, 1, 7], 0), (list(range(20, 40)), 123), ([4], 7), ([], 1)]:
    s = SubsetRandomSampler(indices, generator=torch.Generator().manual_seed(seed))
    subset_random.append({"indices": indices, "seed": seed, "order": list(iter(s))})

weighted = []
for weights, num_samples, replacement, seed in [
        ([0.1, 0.2, 0.3, 0.4], 12, True, 0), ([1, 0, 3, 0, 2], 20, True, 77),
        ([5.0], 3, True, 2), ([0.5, 0.5, 1e-3, 2.0, 0.25, 1.0, 3.0], 50, True, 2**35 + 11),
        ([0.1, 0.2, 0.3, 0.4], 4, False, 3), ([1, 0, 3, 0, 2], 3, False, 8),
        ([0.1, 0.2, 0.3, 0.4], 1, True, 5)]:
    s = WeightedRandomSampler(weights, num_samples, replacement=replacement,
                              generator=torch.Generator().manual_seed(seed))
    weighted.append({"weights": [float(w) for w in weights], "num_samples": num_samples,
                     "replacement": replacement, "seed": seed, "order": list(iter(s))})

batch = []
for n, batch_size, drop_last, seed in [(10, 3, False, None), (10, 3, True, None), (9, 3, True, None),
                                       (10, 4, False, 0), (10, 4, True, 17), (2, 5, False, 3),
                                       (2, 5, True, 3), (0, 2, False, None)]:
    base = (SequentialSampler(range(n)) if seed is None else
            RandomSampler(range(n), generator=torch.Generator().manual_seed(seed)))
    b = BatchSampler(base, batch_size, drop_last)
    batch.append({"n": n, "batch_size": batch_size, "drop_last": drop_last,
                  "seed": -1 if seed is None else seed, "size": len(b), "batches": list(iter(b))})

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "data_utils.json")
with open(path, "w") as f:
    json.dump({"random_split": splits, "subset_random_sampler": subset_random,
               "weighted_random_sampler": weighted, "batch_sampler": batch,
               "torch_version": torch.__version__}, f)
print("wrote", os.path.normpath(path))
