#!/usr/bin/env python3
"""Checks Perfetto trace files (.pftrace) as Perfetto's own definitions read them: each file is
decoded by `protoc --decode=perfetto.protos.Trace` against the vendored perfetto_trace.proto
(tests/data/perfetto/), then every slice begun on a thread track must end there, properly
nested, and the file must hold the slices and counter tracks asked for.

    scripts/check_perfetto.py FILE.pftrace... [--slices forward,backward] [--counters]

Prints, per file, the slices per name asked for and the counter tracks with their values; exits
1 on the first file that fails. Without protoc it prints SKIPPED and exits 0.
"""
import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PROTO_DIR = os.path.join(ROOT, "tests", "data", "perfetto")


def parse(text):
    """protoc's text format as nested lists of (key, value); a message's value is a list."""
    stack = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            done = stack.pop()
            stack[-1][-1] = (stack[-1][-1][0], done)
        elif line.endswith("{"):
            stack[-1].append((line[:-1].strip(), None))
            stack.append([])
        else:
            key, _, value = line.partition(":")
            stack[-1].append((key.strip(), value.strip()))
    return stack[0]


def get(msg, key):
    return next((v for k, v in msg if k == key), None)


def check(path, want_slices, want_counters):
    with open(path, "rb") as f:
        out = subprocess.run(
            ["protoc", "--decode=perfetto.protos.Trace", "-I", PROTO_DIR,
             os.path.join(PROTO_DIR, "perfetto_trace.proto")],
            stdin=f, capture_output=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{path}: protoc could not decode it: {out.stderr.decode()}")
    names = {}      # (sequence, iid) -> event name
    stacks = {}     # sequence -> names of the slices open on its thread track
    slices = {}     # name -> slices begun and ended
    counters = {}   # track uuid -> name
    values = {}     # counter name -> values
    for key, packet in parse(out.stdout.decode()):
        if key != "packet":
            continue
        seq = get(packet, "trusted_packet_sequence_id")
        for k, interned in packet:
            if k == "interned_data":
                for k2, name in interned:
                    if k2 == "event_names":
                        names[(seq, get(name, "iid"))] = get(name, "name").strip('"')
        track = get(packet, "track_descriptor")
        if track is not None and get(track, "counter") is not None:
            counters[get(track, "uuid")] = get(track, "name").strip('"')
        event = get(packet, "track_event")
        if event is None:
            continue
        kind, uuid = get(event, "type"), get(event, "track_uuid")
        if kind == "TYPE_COUNTER":
            if uuid not in counters:
                sys.exit(f"{path}: a counter value on track {uuid}, not a counter track")
            values.setdefault(counters[uuid], []).append(float(get(event, "double_counter_value")))
        elif uuid is None and kind == "TYPE_SLICE_BEGIN":
            iid = get(event, "name_iid")
            name = names.get((seq, iid)) or (get(event, "name") or "").strip('"')
            stacks.setdefault(seq, []).append(name)
        elif uuid is None and kind == "TYPE_SLICE_END":
            if not stacks.get(seq):
                sys.exit(f"{path}: a slice end without its begin (sequence {seq})")
            name = stacks[seq].pop()
            slices[name] = slices.get(name, 0) + 1
    open_ = [n for s in stacks.values() for n in s]
    if open_:
        sys.exit(f"{path}: slices begun and not ended: {open_[:5]}")
    for name in want_slices:
        if not slices.get(name):
            sys.exit(f"{path}: no slice named {name!r} (slices: {sorted(slices)})")
    if want_counters and not values:
        sys.exit(f"{path}: no counter track with values (tracks: {sorted(counters.values())})")
    shown = ", ".join(f"{n} {slices[n]}" for n in want_slices)
    tracks = ", ".join(f"{n} ({len(v)} values)" for n, v in sorted(values.items()))
    print(f"{path}: {sum(slices.values())} slices, all paired ({shown}); counter tracks: {tracks or 'none'}")


def main():
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("files", nargs="+")
    args.add_argument("--slices", default="", help="comma-separated names that must have slices")
    args.add_argument("--counters", action="store_true", help="a counter track must have values")
    a = args.parse_args()
    if shutil.which("protoc") is None:
        print("SKIPPED: protoc is not installed (Debian: protobuf-compiler): "
              f"{len(a.files)} Perfetto file(s) not decoded", file=sys.stderr)
        return 0
    want = [n for n in a.slices.split(",") if n]
    for path in a.files:
        check(path, want, a.counters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
