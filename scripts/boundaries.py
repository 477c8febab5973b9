#!/usr/bin/env python3
"""The module boundaries ARCHITECTURE.md states, checked: data flows one way, from the
recorder into the profile model, and from the model into analyses and outputs.

- profile/ (the model) names no other part of the crate's pipeline;
- analysis/ and output/ read the model only: neither names the other, nor the recorder, the
  layer or the samplers;
- the CLI (src/bin/) uses the library's profile, analysis and output only.

Test code is not checked (a `#[cfg(test)]` module, in its file or in a file of its own): a
test may build what it checks from any part. Comments are not checked. Prints each crossing
(file:line) and exits 1 if there is one. Run by .ci/run.
"""
import os
import re
import sys

PIPELINE = r"(record|output|analysis|layer|samplers|session|backoff|export|guard|builder)"
RULES = [
    ("src/profile", re.compile(r"\b(crate|super::super)::" + PIPELINE + r"\b"),
     "the model (profile/) reaches into another part"),
    ("src/analysis", re.compile(r"\bcrate::(output|record|layer|samplers|session|backoff|export|guard)\b"),
     "an analysis reaches past the model"),
    ("src/output", re.compile(r"\bcrate::(analysis|record|layer|samplers|session|backoff|export|guard)\b"),
     "an output reaches past the model"),
    ("src/bin", re.compile(r"\bspanprof::(record|layer|samplers|session|backoff|export|guard|builder)\b"),
     "the CLI reaches past profile, analysis and output"),
]
TEST_MOD = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")
MOD_DECL = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def test_files(root):
    """Files that are `#[cfg(test)] mod name;` modules of a file under `root`."""
    out = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            lines = open(path, encoding="utf-8").read().splitlines()
            for i, line in enumerate(lines[1:], 1):
                m = MOD_DECL.match(line)
                if m and TEST_MOD.match(lines[i - 1]):
                    base = dirpath if f in ("mod.rs", "lib.rs", "main.rs") else os.path.join(dirpath, f[:-3])
                    out.add(os.path.join(base, m.group(3) + ".rs"))
                    out.add(os.path.join(base, m.group(3), "mod.rs"))
    return out


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    skip = test_files("src")
    failures = 0
    for root, pattern, what in RULES:
        hits = []
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                if not f.endswith(".rs") or path in skip:
                    continue
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    if TEST_MOD.match(line):
                        break  # the file's test module: the rest of the file
                    code = line.split("//", 1)[0]
                    if pattern.search(code):
                        hits.append(f"{path}:{n}: {line.strip()}")
        if hits:
            failures += 1
            print(f"boundaries: {what}:", file=sys.stderr)
            for h in hits:
                print(f"  {h}", file=sys.stderr)
    if failures:
        return 1
    print("boundaries: profile, analysis, output and the CLI keep to their sides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
