#!/usr/bin/env python3
"""The guide's code is compiled code: every ```cpp block in docs/*.md is preceded by a marker
<!-- snippet: examples/FILE.cpp#NAME --> and must equal that file's region between the lines
`// [snippet:NAME]` and `// [/snippet]` (dedented). The examples build and run as ctest tests
(examples/CMakeLists.txt), so every snippet in the guide builds and runs.
Usage: tools/docs.py check | update   (update rewrites the blocks from the examples)"""
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- snippet: (\S+)#(\S+) -->\s*$")


def region(path: pathlib.Path, name: str) -> str:
    lines = path.read_text().splitlines()
    start = f"// [snippet:{name}]"
    try:
        i = next(k for k, l in enumerate(lines) if l.strip() == start)
    except StopIteration:
        raise SystemExit(f"docs.py: {path.relative_to(ROOT)} has no region '{start}'")
    try:
        j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "// [/snippet]")
    except StopIteration:
        raise SystemExit(f"docs.py: {path.relative_to(ROOT)}: region {name} is not closed")
    return textwrap.dedent("\n".join(lines[i + 1:j])).strip("\n")


def process(doc: pathlib.Path, update: bool) -> list:
    lines = doc.read_text().splitlines()
    out, problems, k = [], [], 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("```cpp"):
            m = MARKER.match(lines[k - 1]) if k > 0 else None
            end = next((e for e in range(k + 1, len(lines)) if lines[e].startswith("```")), None)
            if end is None:
                raise SystemExit(f"docs.py: {doc.name}:{k + 1}: unclosed code block")
            body = "\n".join(lines[k + 1:end])
            if not m:
                problems.append(f"{doc.name}:{k + 1}: a cpp block without a snippet marker "
                                "(uncompiled code)")
                out.extend(lines[k:end + 1])
            else:
                want = region(ROOT / m.group(1), m.group(2))
                if body != want:
                    problems.append(f"{doc.name}:{k + 1}: differs from {m.group(1)}#{m.group(2)}")
                out.append(line)
                out.extend((want if update else body).splitlines())
                out.append(lines[end])
            k = end + 1
            continue
        out.append(line)
        k += 1
    if update:
        doc.write_text("\n".join(out) + "\n")
    return problems


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "update"):
        print(__doc__)
        return 2
    update = sys.argv[1] == "update"
    docs = sorted((ROOT / "docs").glob("*.md"))
    problems, blocks = [], 0
    for doc in docs:
        blocks += sum(1 for l in doc.read_text().splitlines() if l.startswith("```cpp"))
        problems += process(doc, update)
    if update:
        problems = [p for p in problems if "marker" in p]
    for p in problems:
        print("docs.py:", p)
    print(f"docs.py: {len(docs)} documents, {blocks} cpp blocks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
