#!/usr/bin/env python3
"""safetensors interop check without torch (json + struct + sys only, any python3).

  safetensors_interop.py write PATH   writes the reference file below, exactly per the spec
                                      (tensors packed in name order, compact JSON header with
                                      __metadata__ first, padded with spaces to 8 bytes)
  safetensors_interop.py check PATH   validates PATH per the spec, checks it holds exactly the
                                      reference tensors/metadata and is byte-identical to `write`

Reference contents: a f32 [2,3] = 0..5, b i64 [4] = [-1, 0, 1, 2**40], c f16 [2] = [0.5, -2],
d bool [3] = [1, 0, 1], e bf16 [1] = [1.5], metadata {"format": "pt"}.
Exit status 0 on success, 1 with a message on stderr otherwise.
"""
import json
import struct
import sys

MAX_HEADER_SIZE = 100_000_000
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1,
               "I8": 1, "I16": 2, "U16": 2, "U32": 4, "U64": 8, "F8_E5M2": 1, "F8_E4M3": 1}


def bf16_bytes(values):
    # truncation is exact for the values used here (1.5 has an exact bf16 encoding)
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)
                    for v in values)


def unpack_bf16(data):
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
            for (h,) in struct.iter_unpack("<H", data)]


# name -> (dtype, shape, values, little-endian bytes)
REFERENCE = {
    "a": ("F32", [2, 3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], struct.pack("<6f", 0, 1, 2, 3, 4, 5)),
    "b": ("I64", [4], [-1, 0, 1, 2**40], struct.pack("<4q", -1, 0, 1, 2**40)),
    "c": ("F16", [2], [0.5, -2.0], struct.pack("<2e", 0.5, -2.0)),
    "d": ("BOOL", [3], [True, False, True], bytes([1, 0, 1])),
    "e": ("BF16", [1], [1.5], bf16_bytes([1.5])),
}
METADATA = {"format": "pt"}


def encode(tensors, metadata):
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name in sorted(tensors):
        dtype, shape, _, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    body = b"".join(tensors[name][3] for name in sorted(tensors))
    return struct.pack("<Q", len(text)) + text + body


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate keys in header: %r" % keys)
    return dict(pairs)


def parse(blob):
    """Strict reader following the reference implementation's validation."""
    if len(blob) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER_SIZE or 8 + n > len(blob):
        raise ValueError("invalid header size %d" % n)
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise ValueError("header does not start with '{'")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    metadata = header.pop("__metadata__", None) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("__metadata__ must map strings to strings")
    data = blob[8 + n:]
    entries = []
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise ValueError("tensor %s: unknown dtype %s" % (name, dtype))
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError("tensor %s: bad shape %r" % (name, shape))
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * DTYPE_SIZES[dtype]:
            raise ValueError("tensor %s: data_offsets do not match dtype and shape" % name)
        entries.append((begin, end, name, dtype, shape))
    pos = 0
    for begin, end, name, _, _ in sorted(entries):
        if begin != pos or end < begin:
            raise ValueError("tensor %s: data_offsets overlap or leave a hole" % name)
        pos = end
    if pos != len(data):
        raise ValueError("tensors cover %d bytes, data buffer has %d" % (pos, len(data)))
    tensors = {name: (dtype, shape, data[begin:end]) for begin, end, name, dtype, shape in entries}
    return tensors, metadata


def decode(dtype, data):
    if dtype == "F32":
        return [v for (v,) in struct.iter_unpack("<f", data)]
    if dtype == "I64":
        return [v for (v,) in struct.iter_unpack("<q", data)]
    if dtype == "F16":
        return [v for (v,) in struct.iter_unpack("<e", data)]
    if dtype == "BOOL":
        return [bool(b) for b in data]
    if dtype == "BF16":
        return unpack_bf16(data)
    raise ValueError("unexpected dtype " + dtype)


def check(path):
    with open(path, "rb") as f:
        blob = f.read()
    tensors, metadata = parse(blob)
    if metadata != METADATA:
        raise ValueError("metadata %r != %r" % (metadata, METADATA))
    if sorted(tensors) != sorted(REFERENCE):
        raise ValueError("tensor names %r != %r" % (sorted(tensors), sorted(REFERENCE)))
    for name, (dtype, shape, values, _) in REFERENCE.items():
        got_dtype, got_shape, data = tensors[name]
        if (got_dtype, got_shape) != (dtype, shape):
            raise ValueError("tensor %s: %s %r, expected %s %r"
                             % (name, got_dtype, got_shape, dtype, shape))
        got = decode(dtype, data)
        if got != values:
            raise ValueError("tensor %s: values %r, expected %r" % (name, got, values))
    if blob != encode(REFERENCE, METADATA):
        raise ValueError("contents are right but the bytes differ from the reference layout")


def main(argv):
    if len(argv) != 3 or argv[1] not in ("write", "check"):
        sys.stderr.write(__doc__)
        return 2
    try:
        if argv[1] == "write":
            with open(argv[2], "wb") as f:
                f.write(encode(REFERENCE, METADATA))
        else:
            check(argv[2])
    except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError) as e:
        sys.stderr.write("safetensors_interop %s %s: FAILED: %s\n" % (argv[1], argv[2], e))
        return 1
    print("safetensors_interop %s %s: OK" % (argv[1], argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
