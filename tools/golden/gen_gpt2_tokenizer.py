#!/usr/bin/python3
"""Goldens for GPT-2's byte-level BPE (data/text/): a reference encoder written from GPT-2's
algorithm (bytes_to_unicode, the `regex` pre-tokenization pattern, merges by rank), a tiny
vocabulary learned here (300 merges on the first 200 kB of data/moby-dick/data.txt, GPT-2's file
format), and the pieces and ids of hand-written adversarial texts (contractions, mixed scripts,
emoji with modifiers, CRLF, runs of spaces and tabs, digits with separators, invalid UTF-8).

Run: python3 tools/golden/gen_gpt2_tokenizer.py   (needs python3-regex and the fetched Moby-Dick)
Writes tests/data/gpt2_tiny_tokenizer/{vocab.json,merges.txt} and tests/data/golden_bpe.json.
Read by tests/test_bpe_tokenizer.cpp.
"""
import collections
import json
import os

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs))), bs


BYTE_ENC, BYTE_ORDER = bytes_to_unicode()


def pieces(data: bytes):
    """GPT-2's split of raw bytes: invalid UTF-8 bytes become lone surrogates (one each)."""
    text = data.decode("utf-8", "surrogateescape")
    return [m.group(0).encode("utf-8", "surrogateescape") for m in PAT.finditer(text)]


def learn(corpus: bytes, n_merges):
    words = collections.Counter(tuple(bytes([b]) for b in p) for p in pieces(corpus))
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        new = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += c
        words = new
    return merges


def bpe(piece: bytes, ranks):
    word = [bytes([b]) for b in piece]
    while len(word) > 1:
        pairs = [(ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
        r, _ = min(pairs)
        if r == 1 << 60:
            break
        a, b = next((word[i], word[i + 1]) for rr, i in pairs if rr == r)
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = out
    return word


def spell(tok: bytes):
    return "".join(BYTE_ENC[b] for b in tok)


ADVERSARIAL = [
    "Hello world", "I'm sure you'll see they've said we'd 'd ' s it's", "DON'T SHOUT'S",
    "  leading and trailing  ", "tabs\tand\t\tmore\t", "line\r\nbreaks\r\n\r\nhere\n",
    "many     spaces   here", "   ", "\n\n\n", "a\u00a0non-breaking\u2003em space",
    "1,234,567.89 and 3.14159 or 1_000_000", "Ünïcödé naïve café", "日本語のテキスト",
    "Привет, мир!", "مرحبا بالعالم", "emoji 👍🏽 family 👨‍👩‍👧 flag 🇫🇷", "mixed🙂text",
    "symbols: @#$%^&*()[]{}<>?/\\|~`", "x² + y³ = z⁴ and ½ ¾ Ⅻ", "<|endoftext|> in text",
    "end with space ", "'s at start", "quotes \"double\" and 'single'",
    "Call me Ishmael. Some years ago--never mind how long precisely--having little or no money "
    "in my purse, I thought I would sail about a little and see the watery part of the world.",
]
INVALID = [b"bad \xff byte", b"\xc3\x28 truncated", b"\xe2\x82 cut", b"overlong \xc0\x80",
           b"surrogate \xed\xa0\x80 here", b"\xf4\x90\x80\x80 too big", b"\x80\x80\x80",
           b"tail \xe2", b"ok \xe2\x82\xac euro"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    corpus = open(os.path.join(root, "data", "moby-dick", "data.txt"), "rb").read()[:200_000]
    merges = learn(corpus, 300)
    vocab = {spell(bytes([b])): i for i, b in enumerate(BYTE_ORDER)}
    for a, b in merges:
        vocab.setdefault(spell(a + b), len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    out_dir = os.path.join(root, "tests", "data", "gpt2_tiny_tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(spell(a) + " " + spell(b) + "\n")
    ranks = {m: i for i, m in enumerate(merges)}
    ids_of = {bytes(t.encode("utf-8")) if t == "<|endoftext|>" else None: v for t, v in vocab.items()}
    raw_vocab = {}
    dec = {c: b for b, c in BYTE_ENC.items()}
    for t, v in vocab.items():
        raw_vocab[t.encode() if t == "<|endoftext|>" else bytes(dec[ch] for ch in t)] = v
    cases = []
    for text in [t.encode("utf-8") for t in ADVERSARIAL] + INVALID:
        ps, ids = [], []
        for chunk_i, chunk in enumerate(text.split(b"<|endoftext|>")):
            if chunk_i:
                ids.append(raw_vocab[b"<|endoftext|>"])
            for p in pieces(chunk):
                ps.append(p)
                ids.extend(raw_vocab[t] for t in bpe(p, ranks))
        cases.append({"text_hex": text.hex(), "pieces_hex": [p.hex() for p in pieces(text)],
                      "ids": ids})
    # The trainer's golden: 80 merges learned on the adversarial texts, three times over.
    train_corpus = ("\n".join(ADVERSARIAL) * 3).encode("utf-8") + b"".join(INVALID)
    trained = learn(train_corpus, 80)
    trainer = {"corpus_hex": train_corpus.hex(), "merges_hex": [[a.hex(), b.hex()] for a, b in trained]}
    with open(os.path.join(root, "tests", "data", "golden_bpe.json"), "w") as f:
        json.dump({"merges": len(merges), "vocab_size": len(vocab), "cases": cases,
                   "trainer": trainer}, f, indent=0)
    print("%d merges, %d tokens, %d cases" % (len(merges), len(vocab), len(cases)))


if __name__ == "__main__":
    main()
