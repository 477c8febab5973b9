#!/usr/bin/env python3
"""Checks that the figures of a spanprof profile add up, as every output shows them.

Usage: scripts/check_profile.py PROFILE.json [--under CHILD=PARENT ...] [--tolerance 0.001]

- per call-tree node: busy = self + the children's busy - what they ran detached from it
  (spawned tasks), within the tolerance (recursion and the tree's [other] nodes excepted);
- per span name: calls in the tree = calls in the table, and the nodes' self total = the
  name's self total (estimates of sampled names included);
- the names' self times add up to the roots' busy time (no name's self time counted twice);
- each --under CHILD=PARENT: every node of CHILD sits under a node of PARENT, and none is
  a root.

Exits 1 naming the first figure that does not add up. Used by .ci/run on the training
example, with RUST_LOG=debug and the back-off forced.
"""
import json
import sys


def scale(n, part, whole):
    if whole == 0:
        return n
    return n * min(part, whole) // whole


def node_busy(n):
    return n["busy"]["total_ns"] + n.get("skipped_ns", 0)


def node_self(n):
    return n["self"]["total_ns"] + scale(
        n.get("skipped_ns", 0), n["self"]["total_ns"], n["busy"]["total_ns"]
    )


def span_scaled(s, stat):
    sampled = s.get("sampled") or {}
    skipped, skipped_ns = sampled.get("skipped", 0), sampled.get("skipped_ns", 0)
    if skipped > 0 and skipped_ns > 0:
        return stat["total_ns"] + scale(skipped_ns, stat["total_ns"], s["entry_busy"]["total_ns"])
    if skipped > 0 and stat["count"] > 0:
        return round(stat["mean_ns"] * (stat["count"] + skipped))
    return stat["total_ns"]


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    path, under, tol = args[0], [], 0.001
    i = 1
    while i < len(args):
        if args[i] == "--under":
            under.append(args[i + 1].split("=", 1))
            i += 2
        elif args[i] == "--tolerance":
            tol = float(args[i + 1])
            i += 2
        else:
            print(f"check_profile: unknown argument {args[i]}", file=sys.stderr)
            return 2
    p = json.load(open(path))
    tree = p.get("tree")
    if not tree:
        print(f"check_profile: {path} has no call tree", file=sys.stderr)
        return 1
    nodes = tree["nodes"]
    children = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        if n.get("parent") is not None:
            children[n["parent"]].append(i)

    def path_of(i):
        names = []
        while i is not None:
            names.append(nodes[i]["name"])
            i = nodes[i].get("parent")
        return ";".join(reversed(names))

    def ancestors(i):
        i = nodes[i].get("parent")
        while i is not None:
            yield i
            i = nodes[i].get("parent")

    failures = []
    for i, n in enumerate(nodes):
        if n.get("other") or any(c for c in children[i] if nodes[c].get("other")):
            continue
        # A name on its own path (recursion) is collapsed into the ancestor's node.
        if any(nodes[a]["name"] == n["name"] for a in ancestors(i)):
            continue
        inside = sum(node_busy(nodes[c]) - nodes[c].get("detached_ns", 0) for c in children[i])
        busy, own = node_busy(n), node_self(n)
        if abs(busy - (own + inside)) > tol * max(busy, 1) + len(children[i]) + 1:
            failures.append(
                f"node {path_of(i)}: busy {busy} ns != self {own} + children {inside} ns"
            )
    for s in p["spans"]:
        key = (s["name"], s["target"])
        mine = [n for n in nodes if (n["name"], n["target"]) == key]
        calls = sum(n["calls"] for n in mine)
        if calls != s["calls"]:
            failures.append(f"span {s['name']}: {calls} calls in the tree, {s['calls']} in the table")
        tree_self = sum(node_self(n) for n in mine)
        table_self = span_scaled(s, s["entry_self"])
        if abs(tree_self - table_self) > tol * max(table_self, 1) + len(mine) + 1:
            failures.append(
                f"span {s['name']}: self {tree_self} ns in the tree, {table_self} ns in the table"
            )
    names_self = sum(span_scaled(s, s["entry_self"]) for s in p["spans"])
    roots_busy = sum(node_busy(n) + 0 for n in nodes if n.get("parent") is None)
    detached = sum(n.get("detached_ns", 0) for n in nodes if n.get("parent") is not None)
    if names_self > (roots_busy + detached) * (1 + tol) + len(nodes):
        failures.append(
            f"the names' self times ({names_self} ns) add up past the roots' busy time "
            f"({roots_busy} ns, + {detached} ns run detached)"
        )
    for child, parent in under:
        idx = [i for i, n in enumerate(nodes) if n["name"] == child]
        if not idx:
            failures.append(f"no node of {child}")
        for i in idx:
            if not any(nodes[a]["name"] == parent for a in ancestors(i)):
                failures.append(f"{path_of(i)}: {child} is not under {parent}")
    for f in failures:
        print(f"check_profile: {path}: {f}", file=sys.stderr)
    if failures:
        return 1
    print(
        f"check_profile: {path}: {len(nodes)} nodes and {len(p['spans'])} names add up "
        f"(names' self {names_self / 1e9:.3f} s, roots' busy {roots_busy / 1e9:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
