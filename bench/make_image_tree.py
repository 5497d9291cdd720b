#!/usr/bin/python3
# Writes a synthetic ImageFolder of JPEGs for the loader bench: CLASSES class folders of N images
# each, 500x375 (ImageNet's typical size), photo-like content (smooth colour fields, edges and
# noise, so the entropy decoder works as on photos), quality 90, 4:2:0 (PIL's defaults).
# Usage: /usr/bin/python3 bench/make_image_tree.py OUT [N_PER_CLASS=100] [CLASSES=10]
import os
import sys

import numpy as np
from PIL import Image

out = sys.argv[1]
per_class = int(sys.argv[2]) if len(sys.argv) > 2 else 100
classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
rng = np.random.default_rng(0)
h, w = 375, 500
yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
for c in range(classes):
    os.makedirs(os.path.join(out, "train", f"class{c:02d}"), exist_ok=True)
    for i in range(per_class):
        img = np.zeros((h, w, 3), np.float32)
        for ch in range(3):
            f = rng.uniform(0.005, 0.05, 4)
            p = rng.uniform(0, 6.28, 4)
            img[..., ch] = 128 + 60 * np.sin(f[0] * xx + p[0]) * np.cos(f[1] * yy + p[1]) \
                + 40 * np.sin(f[2] * (xx + yy) + p[2])
        # a few hard edges (rectangles) and sensor-like noise
        for _ in range(6):
            y0, x0 = rng.integers(0, h - 40), rng.integers(0, w - 40)
            img[y0:y0 + rng.integers(20, 120), x0:x0 + rng.integers(20, 160)] += rng.uniform(-60, 60, 3)
        img += rng.normal(0, 6, img.shape)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
            os.path.join(out, "train", f"class{c:02d}", f"{i:04d}.jpg"), quality=90)
print(f"wrote {classes * per_class} JPEGs ({w}x{h}) to {out}/train")
