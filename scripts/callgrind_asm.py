#!/usr/bin/env python3
"""Where a hot path's instructions go, instruction by instruction: callgrind's per-instruction
counts (`--dump-instr=yes`) joined with objdump's disassembly.

    bin=$(ls -t target/release/deps/instructions-* | grep -v '\.d$' | head -1)
    CASE=basic SPANS=40000 valgrind --tool=callgrind --toggle-collect='*measured_spans*' \
        --dump-instr=yes --callgrind-out-file=/tmp/cg.out "$bin" --bench
    scripts/callgrind_asm.py /tmp/cg.out "$bin" 40000 'Recorder::exit::{{closure}}'

Prints the 40 functions with the most instructions of their own, per span (count / DIVISOR),
then, for each function whose name contains one of the given substrings, every instruction
it executed with its count per span. Needs objdump (binutils)."""
import re, subprocess, sys, collections
out, binary, div = sys.argv[1], sys.argv[2], float(sys.argv[3])
pats = sys.argv[4:]
counts = collections.Counter()
fn_of = {}
names = {}
fn = None
addr = 0
callline = False
def num(tok, cur):
    if tok == '*': return cur
    if tok.startswith('+'): return cur + int(tok[1:], 0)
    if tok.startswith('-'): return cur - int(tok[1:], 0)
    return int(tok, 0)
for line in open(out):
    line = line.rstrip('\n')
    m = re.match(r'fn=\((\d+)\)(?: (.*))?', line)
    if m:
        i, n = m.group(1), m.group(2)
        if n: names[i] = n
        fn = names.get(i, i); continue
    m = re.match(r'cfn=\((\d+)\)(?: (.*))?', line)
    if m:
        if m.group(2): names[m.group(1)] = m.group(2)
        continue
    if line.startswith('calls='):
        callline = True; continue
    if line and (line[0] in '0123456789+-*'):
        toks = line.split()
        a = num(toks[0], addr)
        if callline:
            callline = False; addr = a; continue  # inclusive cost of call: skip
        addr = a
        if len(toks) >= 3:
            counts[a] += int(toks[2]); fn_of[a] = fn
per_fn = collections.Counter()
for a, c in counts.items(): per_fn[fn_of[a]] += c
sel = [f for f in per_fn if any(p in f for p in pats)] if pats else []
for f in sorted(per_fn, key=lambda f: -per_fn[f])[:40]:
    print(f"{per_fn[f]/div:9.1f}  {f[:150]}")
if not sel: sys.exit()
dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', '-C', binary], capture_output=True, text=True).stdout
asm = {}
for l in dis.splitlines():
    m = re.match(r'\s*([0-9a-f]+):\s+(.*)', l)
    if m: asm[int(m.group(1), 16)] = m.group(2)
for f in sel:
    print(f"\n=== {f}  self {per_fn[f]/div:.1f}")
    for a in sorted(x for x in counts if fn_of[x] == f):
        if counts[a]/div >= 0.05:
            print(f"  {a:8x} {counts[a]/div:6.2f}  {asm.get(a,'?')}")
