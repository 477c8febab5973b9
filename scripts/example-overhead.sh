#!/usr/bin/env bash
# Overhead of spanprof on an example: interleaved runs with and without the layer (same
# registry and EnvFilter either way). The training example (the default) compares its
# "training took" wall times; EXAMPLE=async the async server's CPU time ("serving took … of
# CPU": its client paces the requests, so the wall time does not move), REQUESTS of them, RATE
# per millisecond.
#
#   scripts/example-overhead.sh [RUNS] [PRESET]      (defaults: 10 runs, SPANPROF=basic)
#   EXAMPLE=async REQUESTS=20000 scripts/example-overhead.sh 6 detailed
#
# RUST_LOG and SPANPROF_MAX_OVERHEAD pass through (RUST_LOG=debug: the per-layer spans too).
# PIN=1 runs both on CPU 1 (taskset). Runs are paired and their order alternates (with, without;
# without, with; ...), so a drift of the machine weighs on both sides: the paired mean of the
# ratios is printed with its 95% confidence interval (Student's t), beside min and median.
# Prints spanprof's own estimate of its cost beside the measured one.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
preset=${2:-basic}
example=${EXAMPLE:-training}
case $example in
  training) name=training_loop; args=(); took() { grep -Eo 'training took [0-9.]+ s' | awk '{print $3}'; } ;;
  async) name=async_server; args=(--requests "${REQUESTS:-20000}" --rate "${RATE:-4}"); took() { grep -Eo 'serving took [0-9.]+ s' | awk '{print $3}'; } ;;
  *) echo "EXAMPLE is training or async" >&2; exit 2 ;;
esac
cargo build --release --example "$name" >/dev/null 2>&1
bin=target/release/examples/$name
out=$(mktemp -d)
pin=()
[ -z "${PIN:-}" ] || pin=(taskset -c "$PIN")
without() { "${pin[@]}" "$bin" "${args[@]}" --no-profile --out "$out" 2>&1 >/dev/null | took; }
with() { SPANPROF=$preset SPANPROF_REPORT=off "${pin[@]}" "$bin" "${args[@]}" --out "$out" 2>&1 >/dev/null | took; }
base=() prof=()
for i in $(seq "$runs"); do
  if [ $((i % 2)) -eq 1 ]; then
    base+=("$(without)"); prof+=("$(with)")
  else
    prof+=("$(with)"); base+=("$(without)")
  fi
done
python3 - "$preset" "${base[*]}" "${prof[*]}" "$out/profile.json" <<'PY'
import json, statistics, sys
preset, base, prof, profile = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split())), sys.argv[4]
spans = json.load(open(profile))["spans"]
created, entries = sum(s["created"] for s in spans), sum(s["calls"] for s in spans)
def show(name, xs): print(f"{name:>12}: min {min(xs):.3f} s  median {statistics.median(xs):.3f} s  ({len(xs)} runs)")
show("no spanprof", base); show(f"SPANPROF={preset}", prof)
print(f"overhead: min {100*(min(prof)/min(base)-1):+.2f} %  median {100*(statistics.median(prof)/statistics.median(base)-1):+.2f} %")
ratios = [100 * (p / b - 1) for p, b in zip(prof, base)]
if len(ratios) > 1:
    # Student's t, 97.5th percentile, by degrees of freedom (1.96 past 30).
    t = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
         10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11,
         18: 2.10, 19: 2.09, 20: 2.09, 25: 2.06, 30: 2.04}
    df = len(ratios) - 1
    tq = t.get(df) or next((v for k, v in sorted(t.items()) if k >= df), 1.96)
    mean, half = statistics.mean(ratios), tq * statistics.stdev(ratios) / len(ratios) ** 0.5
    print(f"paired: mean {mean:+.2f} %  95% CI [{mean - half:+.2f}, {mean + half:+.2f}] %  ({len(ratios)} pairs)")
print(f"per run: {created} spans created, {entries} entries")
o = json.load(open(profile)).get("overhead")
if o:
    est = 100 * o["estimated_ns"] / 1e9 / statistics.median(base)
    print(f"spanprof's own estimate (last run): {o['percent']:.2f} % of its CPU time, "
          f"{o['estimated_ns'] / 1e6:.1f} ms = {est:.2f} % of the median run without it")
steps = json.load(open(profile)).get("backoff", [])
print(f"back-off steps (last run): {len(steps)}")
PY
