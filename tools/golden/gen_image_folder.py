#!/usr/bin/python3
# torchvision 0.14's ImageFolder order on a generated tree: class folders in mixed case (Python
# sorts by code point: upper case first), nested subfolders, upper-case extensions, files that
# are skipped (no image extension) and a non-folder at the root. The test rebuilds the same tree
# and checks minidl's classes(), class_to_idx() and samples() against these.
# Run: /usr/bin/python3 tools/golden/gen_image_folder.py  -> tests/data/golden_image_folder.json
import json
import os
import tempfile

import torchvision

FILES = [
    "zebra/b.png", "zebra/a.JPG", "zebra/notes.txt", "zebra/sub/c.jpeg",
    "zebra/sub b/d.png", "zebra/sub-a/e.png", "zebra/sub/deeper/f.PNG",
    "Apple/x.png", "Apple/x.png.bak", "Apple/Y.png", "Apple/y.bmp", "Apple/_z.webp",
    "banana/1.png", "banana/10.png", "banana/2.png", "banana/.hidden.png",
    "Cherry/img.tiff", "Cherry/img.jpg", "Cherry/README",
    "README.md",
]

root = tempfile.mkdtemp()
for rel in FILES:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x")
ds = torchvision.datasets.ImageFolder(root, loader=lambda p: p)
out = {
    "files": FILES,
    "classes": ds.classes,
    "class_to_idx": ds.class_to_idx,
    "samples": [[os.path.relpath(p, root), t] for p, t in ds.samples],
}
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "..", "tests", "data", "golden_image_folder.json"), "w") as f:
    json.dump(out, f, indent=1)
print(json.dumps(out["samples"]))
