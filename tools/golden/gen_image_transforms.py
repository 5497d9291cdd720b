#!/usr/bin/python3
"""Golden values for data/image/image_transforms (torchvision 0.14.1 tensor transforms, torch 1.13):
resize in every mode (antialiased bilinear down by 2, by non-integer factors, up, one side up
and one down, Resize(int) sizes), resized_crop, center_crop (odd/even offsets, larger than the
image), brightness / contrast / saturation / hue / grayscale and convert_image_dtype, each on a
float32 image in [0, 1] and its uint8 counterpart.

The inputs are not stored: both sides compute them from a hash of the element index (see
`hashed` here and `hashed_image` in tests/test_image_transforms.cpp).

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_image_transforms.py
Writes tests/data/golden_image_transforms.json ({"shape": [...], "data": [...]} per result).
Read by tests/test_image_transforms.cpp.
"""
import json
import os

import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F


def hashed(shape, salt):
    """h = ((i + 1) * 2654435761 + salt) mod 2^32 per element: uint8 = h >> 24, float = (h >> 8) / 2^24."""
    n = 1
    for s in shape:
        n *= s
    h = [((i + 1) * 2654435761 + salt) % (1 << 32) for i in range(n)]
    u8 = torch.tensor([v >> 24 for v in h], dtype=torch.uint8).reshape(shape)
    f32 = torch.tensor([(v >> 8) / float(1 << 24) for v in h], dtype=torch.float32).reshape(shape)
    return f32, u8


def enc(t):
    t = t.detach()
    if t.is_floating_point():
        data = [float("%.6g" % v) for v in t.reshape(-1).tolist()]
    else:
        data = [int(v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
         "nearest": InterpolationMode.NEAREST}

out = {}
xf, xu = hashed((3, 23, 17), 12345)
# (name, mode, antialias, size); size [h, w] or [shorter side]
resizes = [
    ("down2", "bilinear", True, [11, 8]),
    ("down_frac", "bilinear", True, [9, 7]),
    ("up", "bilinear", True, [26, 19]),
    ("up_down", "bilinear", True, [30, 10]),
    ("shorter12", "bilinear", True, [12]),
    ("shorter20", "bilinear", True, [20]),
    ("plain_down", "bilinear", False, [9, 7]),
    ("plain_up", "bilinear", False, [26, 19]),
    ("cubic_down", "bicubic", True, [9, 7]),
    ("cubic_up", "bicubic", True, [26, 19]),
    ("cubic_plain_down", "bicubic", False, [9, 7]),
    ("cubic_plain_up", "bicubic", False, [26, 19]),
    ("nearest_down", "nearest", False, [9, 7]),
    ("nearest_up", "nearest", False, [26, 19]),
]
for name, mode, aa, size in resizes:
    for tag, x in (("f32", xf), ("u8", xu)):
        if mode == "nearest" and tag == "f32":
            continue  # the same indices as uint8
        y = F.resize(x, size, interpolation=MODES[mode], antialias=aa if mode != "nearest" else None)
        out[f"resize_{name}_{tag}"] = enc(y)

# resized_crop(top=3, left=2, h=15, w=11) -> 7 x 9 (fused crop + filter)
for tag, x in (("f32", xf), ("u8", xu)):
    out[f"resized_crop_{tag}"] = enc(F.resized_crop(x, 3, 2, 15, 11, [7, 9], antialias=True))

for h, w in ((10, 8), (11, 9), (26, 20), (25, 9), (23, 17)):
    out[f"center_crop_{h}x{w}"] = enc(F.center_crop(xu, [h, w]))

cf, cu = hashed((3, 10, 9), 777)
color = [("brightness", F.adjust_brightness, (0.6, 1.7)),
         ("contrast", F.adjust_contrast, (0.5, 1.8)),
         ("saturation", F.adjust_saturation, (0.3, 2.0)),
         ("hue", F.adjust_hue, (-0.3, 0.1))]
for name, fn, factors in color:
    for k, f in enumerate(factors):
        for tag, x in (("f32", cf), ("u8", cu)):
            out[f"{name}{k}_{tag}"] = enc(fn(x, f))
for tag, x in (("f32", cf), ("u8", cu)):
    out[f"grayscale_{tag}"] = enc(F.rgb_to_grayscale(x))
out["convert_f32_u8"] = enc(F.convert_image_dtype(xf, torch.uint8))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                    "golden_image_transforms.json")
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")
