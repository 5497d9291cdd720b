#!/usr/bin/python3
"""Tiny image files and the bytes PIL 9.4 decodes from them, for data/image/ (read_image).

PNGs are written here by hand (zlib + every filter type + Adam7), so the files do not depend on
the PNG writer under test: grey 1/2/4/8/16-bit, grey+alpha, palette 4/8-bit with and without
tRNS, RGB and RGBA 8/16-bit, interlaced, grey and RGB with a tRNS colour. JPEGs are saved by PIL
(libjpeg-turbo): 4:2:0, 4:2:2, 4:4:4, grey, progressive, Adobe CMYK, odd sizes (17x11) so that
chroma upsampling edges are tested.

The golden of each (file, mode) is PIL's Image.open(p).convert(M) as uint8 [C,H,W] with M =
"RGB", "L", "RGBA", "LA" for RGB, GRAY, RGB_ALPHA, GRAY_ALPHA; UNCHANGED is the file's own
channels (palette -> RGB, or RGBA with tRNS; CMYK -> RGB). Where minidl follows torchvision or
keeps a tRNS alpha instead of PIL, the golden says so in "note":
  * 16-bit grey: PIL opens it as mode "I" and clips to 255; minidl keeps the high byte of every
    16-bit sample (libpng's png_set_strip_16), as PIL does for 16-bit RGB(A) and grey+alpha.
  * RGB + tRNS -> GRAY_ALPHA: PIL's convert("LA") drops the tRNS colour; minidl keeps it as
    alpha, as RGB_ALPHA does (PIL's convert("RGBA").convert("LA")).
The script also decodes every file with torchvision 0.14 and prints where it differs
(torchvision 0.14 refuses 16-bit PNGs, has no *_ALPHA modes for JPEG and no CMYK, returns
palette indices for UNCHANGED, ignores tRNS, and its GRAY is libpng/libjpeg's own grey, off by
one here and there).

Run: /usr/bin/python3 tools/golden/gen_images.py
Writes tests/data/images/*.{png,jpg} and tests/data/golden_images.json, which also holds
torchvision 0.14's encode_png / encode_jpeg bytes of a fixed pattern (same libraries as minidl).
Read by tests/test_image_io.cpp.
"""
import io
import json
import os
import struct
import warnings
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "..", "tests", "data", "images")
GOLDEN = os.path.join(HERE, "..", "..", "tests", "data", "golden_images.json")
rng = np.random.RandomState(0)


# ---- a PNG writer: samples [H][W*C] ints -> bytes
def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def pack_row(samples, bit_depth):
    if bit_depth == 16:
        return b"".join(struct.pack(">H", int(s)) for s in samples)
    if bit_depth == 8:
        return bytes(int(s) for s in samples)
    per = 8 // bit_depth
    out = bytearray()
    for i in range(0, len(samples), per):
        b = 0
        for j in range(per):
            s = int(samples[i + j]) if i + j < len(samples) else 0
            b |= s << (8 - bit_depth * (j + 1))
        out.append(b)
    return bytes(out)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def filter_rows(rows, bpp):
    """Filters packed rows, cycling filter types 0..4 so that every unfilter path runs."""
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for y, row in enumerate(rows):
        ft = y % 5
        f = bytearray()
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = [0, a, b, (a + b) // 2, paeth(a, b, c)][ft]
            f.append((x - pred) & 0xFF)
        out += bytes([ft]) + f
        prev = row
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def write_png(name, pix, bit_depth, color_type, palette=None, trns=None, interlace=False):
    """pix: int array [H, W, C] of samples (palette indices for color type 3)."""
    h, w, c = pix.shape
    bpp = max(1, c * bit_depth // 8)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    raw = b""
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        sub = pix[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        rows = [pack_row(sub[y].reshape(-1), bit_depth) for y in range(sub.shape[0])]
        raw += filter_rows(rows, bpp)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if palette is not None:
        data += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        data += chunk(b"tRNS", trns)
    comp = zlib.compress(raw, 9)
    data += chunk(b"IDAT", comp[: len(comp) // 2]) + chunk(b"IDAT", comp[len(comp) // 2:])
    data += chunk(b"IEND", b"")
    with open(os.path.join(OUT_DIR, name), "wb") as f:
        f.write(data)


def smooth(h, w, c, hi):
    """A gradient plus noise: compresses well, exercises JPEG's upsampling and every value."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 37 + yy * 11 + k * 53) % 97 for k in range(c)], -1) / 96.0
    return np.clip(base * hi + rng.randint(0, hi // 8 + 1, (h, w, c)), 0, hi).astype(np.int64)


def make_pngs():
    write_png("gray8.png", rng.randint(0, 256, (5, 7, 1)), 8, 0)
    g16 = rng.randint(0, 65536, (5, 7, 1))
    g16[0, :3, 0] = [0, 255, 65535]
    write_png("gray16.png", g16, 16, 0)
    for bits in (1, 2, 4):
        write_png(f"gray{bits}.png", rng.randint(0, 1 << bits, (9, 13, 1)), bits, 0)
    write_png("gray_alpha8.png", rng.randint(0, 256, (5, 7, 2)), 8, 4)
    write_png("gray_alpha16.png", rng.randint(0, 65536, (5, 7, 2)), 16, 4)
    pal = rng.randint(0, 256, (11, 3))
    write_png("palette4.png", rng.randint(0, 11, (9, 13, 1)), 4, 3, palette=pal)
    pal8 = rng.randint(0, 256, (200, 3))
    idx = rng.randint(0, 200, (5, 7, 1))
    write_png("palette8.png", idx, 8, 3, palette=pal8)
    # tRNS shorter than the palette: entries past it are opaque.
    write_png("palette_trns.png", rng.randint(0, 11, (9, 13, 1)), 4, 3, palette=pal,
              trns=bytes([0, 255, 128, 7, 200, 0]))
    write_png("rgb8.png", rng.randint(0, 256, (5, 7, 3)), 8, 2)
    write_png("rgb16.png", rng.randint(0, 65536, (5, 7, 3)), 16, 2)
    write_png("rgba8.png", rng.randint(0, 256, (5, 7, 4)), 8, 6)
    write_png("rgba16.png", rng.randint(0, 65536, (5, 7, 4)), 16, 6)
    write_png("interlaced_rgb.png", rng.randint(0, 256, (9, 13, 3)), 8, 2, interlace=True)
    write_png("interlaced_gray2.png", rng.randint(0, 4, (11, 17, 1)), 2, 0, interlace=True)
    g = rng.randint(0, 8, (5, 7, 1)) * 30
    write_png("gray_trns.png", g, 8, 0, trns=struct.pack(">H", 60))
    rgb = rng.randint(0, 3, (5, 7, 3)) * 100
    rgb[1, 2] = rgb[3, 4] = [100, 0, 200]
    write_png("rgb_trns.png", rgb, 8, 2, trns=struct.pack(">HHH", 100, 0, 200))


def make_jpegs():
    def save(name, arr, mode, **kw):
        Image.fromarray(arr.astype(np.uint8), mode).save(os.path.join(OUT_DIR, name), **kw)

    save("rgb420.jpg", smooth(11, 17, 3, 255), "RGB", quality=90, subsampling=2)
    save("rgb422.jpg", smooth(9, 13, 3, 255), "RGB", quality=90, subsampling=1)
    save("rgb444.jpg", smooth(9, 13, 3, 255), "RGB", quality=90, subsampling=0)
    save("gray.jpg", smooth(9, 13, 1, 255)[:, :, 0], "L", quality=90)
    save("progressive.jpg", smooth(11, 17, 3, 255), "RGB", quality=85, progressive=True)
    save("cmyk.jpg", smooth(9, 13, 4, 255), "CMYK", quality=90)


def chw(a):
    a = np.asarray(a, np.uint8)
    if a.ndim == 2:
        a = a[:, :, None]
    return a.transpose(2, 0, 1)


def goldens(path):
    im = Image.open(path)
    note = None
    if im.mode == "I":  # 16-bit grey: the high byte, not PIL's clip
        hi = (np.asarray(im, np.int64) >> 8).astype(np.uint8)
        im = Image.fromarray(hi, "L")
        note = "16-bit grey: high byte (PIL clips)"
    out = {}
    for mode, pil in (("RGB", "RGB"), ("GRAY", "L"), ("RGB_ALPHA", "RGBA"), ("GRAY_ALPHA", "LA")):
        out[mode] = chw(im.convert(pil))
    if im.mode == "RGB" and "transparency" in im.info:
        out["GRAY_ALPHA"] = chw(im.convert("RGBA").convert("LA"))
        note = "RGB + tRNS: GRAY_ALPHA keeps the tRNS alpha (PIL's convert('LA') drops it)"
    if path.endswith(".png"):  # the stored colour type (PIL opens 16-bit grey+alpha as RGBA)
        color_type = open(path, "rb").read()[25]
        unchanged = {0: "GRAY", 4: "GRAY_ALPHA", 2: "RGB", 6: "RGB_ALPHA"}.get(color_type)
        if color_type == 3:
            unchanged = "RGB_ALPHA" if "transparency" in im.info else "RGB"
    else:
        unchanged = {"L": "GRAY", "RGB": "RGB", "CMYK": "RGB"}[im.mode]
    out["UNCHANGED"] = out[unchanged]
    return out, note


def torchvision_diffs(path, gold):
    import torch
    from torchvision.io import ImageReadMode, decode_image
    data = torch.from_numpy(np.fromfile(path, np.uint8))
    diffs = []
    for mode, want in gold.items():
        try:
            got = decode_image(data, getattr(ImageReadMode, mode)).numpy()
        except Exception as e:  # noqa: BLE001
            diffs.append(f"{mode}: {str(e).splitlines()[0][:60]}")
            continue
        if got.shape != want.shape:
            diffs.append(f"{mode}: shape {list(got.shape)}")
        elif (got != want).any():
            d = np.abs(got.astype(int) - want.astype(int))
            diffs.append(f"{mode}: {int((d > 0).sum())} bytes differ (max {int(d.max())})")
    return diffs


def pattern(c, h, w):
    """The encoders' input, rebuilt by the test: x[c,y,x] = (37x + 11y + 53c + 9((x*y) % 7)) % 256."""
    cc, yy, xx = np.mgrid[0:c, 0:h, 0:w]
    return ((xx * 37 + yy * 11 + cc * 53 + (xx * yy % 7) * 9) % 256).astype(np.uint8)


def encodings():
    """torchvision 0.14's encode_png / encode_jpeg bytes (same libpng, zlib and libjpeg-turbo)."""
    import torch
    from torchvision.io import encode_jpeg, encode_png
    out = {}
    for c in (1, 3):  # torchvision's encode_png takes no alpha
        for level in (0, 6, 9):
            x = torch.from_numpy(pattern(c, 11, 17))
            out[f"png_c{c}_level{level}"] = encode_png(x, level).tolist()
    for c, q in ((1, 75), (3, 75), (3, 95), (3, 10)):
        out[f"jpeg_c{c}_quality{q}"] = encode_jpeg(torch.from_numpy(pattern(c, 11, 17)), q).tolist()
    return out


def main():
    warnings.simplefilter("ignore")  # PIL's advice on palette transparency
    os.makedirs(OUT_DIR, exist_ok=True)
    make_pngs()
    make_jpegs()
    files = {}
    for name in sorted(os.listdir(OUT_DIR)):
        path = os.path.join(OUT_DIR, name)
        gold, note = goldens(path)
        entry = {m: {"shape": list(a.shape), "data": a.reshape(-1).tolist()} for m, a in gold.items()}
        if note:
            entry["note"] = note
        files[name] = entry
        diffs = torchvision_diffs(path, gold)
        print(f"{name:22s} {os.path.getsize(path):5d} B  torchvision 0.14: {'; '.join(diffs) or 'same'}")
    with open(GOLDEN, "w") as f:
        json.dump({"files": files, "encode": encodings()}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
