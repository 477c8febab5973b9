#!/usr/bin/env bash
# No distortion: a preset must not move the figures of other spans. Each round runs the
# training example twice at `basic` side by side, both pinned to one CPU (`taskset -c 0`: each
# is preempted by the other, also inside spanprof's system calls), then twice at `detailed` (or
# $PRESET) the same way; it compares the busy and self time per span name (every name with at
# least 1% of the self time), median over every run of each preset: as absolute times and as
# shares of the run's time in spans. Exits 1 if a name's share differs by more than 5% (with
# CHECK=absolute, its absolute time: on a quiet machine only: other processes' load on the CPU
# stretches every span of a run alike, which the shares cancel).
# RUST_LOG defaults to `debug`: the per-layer `linear` spans too, the most entries per second.
#
#   scripts/distortion.sh                  # 3 rounds, basic vs detailed, 3 epochs
#   ROUNDS=5 PRESET=full EPOCHS=5 scripts/distortion.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "SKIPPED: taskset is not installed (util-linux)" >&2; exit 0; }
taskset -c 0 true 2>/dev/null || { echo "SKIPPED: this machine does not allow pinning to CPU 0" >&2; exit 0; }
rounds=${ROUNDS:-3}
preset=${PRESET:-detailed}
epochs=${EPOCHS:-3}
export RUST_LOG=${RUST_LOG:-debug}
cargo build -q --release --example training_loop
bin=target/release/examples/training_loop
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pair() { # round preset: two runs side by side on CPU 0
  local a b
  for k in 1 2; do mkdir -p "$tmp/$2/$1-$k"; done
  SPANPROF=$2 SPANPROF_REPORT=off SPANPROF_MAX_OVERHEAD=off taskset -c 0 "$bin" --epochs "$epochs" --out "$tmp/$2/$1-1" >/dev/null 2>&1 &
  a=$!
  SPANPROF=$2 SPANPROF_REPORT=off SPANPROF_MAX_OVERHEAD=off taskset -c 0 "$bin" --epochs "$epochs" --out "$tmp/$2/$1-2" >/dev/null 2>&1 &
  b=$!
  wait "$a" "$b"
}
for r in $(seq "$rounds"); do
  pair "$r" basic
  pair "$r" "$preset"
done
python3 - "$tmp" "$preset" "${CHECK:-share}" <<'PY'
import glob, json, statistics, sys
tmp, preset, check = sys.argv[1], sys.argv[2], sys.argv[3]
def load(p):
    runs = []
    for f in sorted(glob.glob(f"{tmp}/{p}/*/profile.json")):
        spans = json.load(open(f))["spans"]
        runs.append({(s["target"], s["name"]): s for s in spans})
    return runs
basic, other = load("basic"), load(preset)
total = sum(s["self"]["total_ns"] for s in basic[0].values())
names = [k for k, s in basic[0].items() if s["self"]["total_ns"] >= total / 100]
def share(run, key, field):
    return run[key][field]["total_ns"] / sum(s["self"]["total_ns"] for s in run.values())
worst = {"absolute": 0.0, "share": 0.0}
print(f"{'span':<20} {'field':<5} {'basic ms':>9} {preset + ' ms':>12} {'diff %':>7}"
      f" {'basic share':>12} {preset + ' share':>15} {'diff %':>7}")
for key in sorted(names, key=lambda k: -basic[0][k]["self"]["total_ns"]):
    for field in ("busy", "self"):
        b = statistics.median(x[key][field]["total_ns"] for x in basic)
        d = statistics.median(y[key][field]["total_ns"] for y in other)
        bs = statistics.median(share(x, key, field) for x in basic)
        ds = statistics.median(share(y, key, field) for y in other)
        diff, sdiff = (100 * (d / b - 1) if b else 0.0), (100 * (ds / bs - 1) if bs else 0.0)
        worst["absolute"] = max(worst["absolute"], abs(diff))
        worst["share"] = max(worst["share"], abs(sdiff))
        print(f"{key[1]:<20} {field:<5} {b / 1e6:>9.1f} {d / 1e6:>12.1f} {diff:>+7.2f}"
              f" {100 * bs:>11.2f}% {100 * ds:>14.2f}% {sdiff:>+7.2f}")
print(f"(medians of {len(basic)} and {len(other)} runs, two at a time on CPU 0)")
o = [y for y in glob.glob(f"{tmp}/{preset}/*/profile.json")]
ov = [json.load(open(f)).get("overhead") or {} for f in o]
print(f"{preset}: spanprof's readings {statistics.median(x.get('readings_ns', 0) for x in ov) / 1e6:.1f} ms "
      f"per run (median), kept out of the spans")
print(f"largest difference: absolute {worst['absolute']:.2f} %, share {worst['share']:.2f} %"
      f" (limit 5 % on the {check})")
sys.exit(0 if worst[check] <= 5.0 else 1)
PY
