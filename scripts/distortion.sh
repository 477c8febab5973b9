#!/usr/bin/env bash
# No distortion: a preset must not move the figures of other spans. Runs the training example
# at `basic` and at `detailed` (or $PRESET) side by side, both pinned to one CPU (`taskset -c 0`,
# so each is preempted by the other, also inside spanprof's system calls), ROUNDS times, and
# compares the busy and self time per span name between the two profiles (every name with at
# least 1% of the run's self time). Exits 1 if a name differs by more than 5% (median over
# the rounds, so one unlucky round does not decide).
#
# RUST_LOG defaults to `debug`: the per-layer `linear` spans too, the most entries per second.
#
#   scripts/distortion.sh                  # 3 rounds, basic vs detailed, 10 epochs
#   ROUNDS=5 PRESET=full EPOCHS=5 scripts/distortion.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "SKIPPED: taskset is not installed (util-linux)" >&2; exit 0; }
taskset -c 0 true 2>/dev/null || { echo "SKIPPED: this machine does not allow pinning to CPU 0" >&2; exit 0; }
rounds=${ROUNDS:-3}
preset=${PRESET:-detailed}
epochs=${EPOCHS:-10}
export RUST_LOG=${RUST_LOG:-debug}
cargo build -q --release --example training_loop
bin=target/release/examples/training_loop
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
  mkdir -p "$tmp/$r/basic" "$tmp/$r/$preset"
  SPANPROF=basic SPANPROF_REPORT=off taskset -c 0 "$bin" --epochs "$epochs" --out "$tmp/$r/basic" >/dev/null 2>&1 &
  a=$!
  SPANPROF=$preset SPANPROF_REPORT=off taskset -c 0 "$bin" --epochs "$epochs" --out "$tmp/$r/$preset" >/dev/null 2>&1 &
  b=$!
  wait "$a" "$b"
done
python3 - "$tmp" "$rounds" "$preset" <<'PY'
import json, statistics, sys
tmp, rounds, preset = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(r, p):
    spans = json.load(open(f"{tmp}/{r}/{p}/profile.json"))["spans"]
    return {(s["target"], s["name"]): s for s in spans}
runs = [(load(r, "basic"), load(r, preset)) for r in range(1, rounds + 1)]
total = sum(s["self"]["total_ns"] for s in runs[0][0].values())
names = [k for k, s in runs[0][0].items() if s["self"]["total_ns"] >= total / 100]
worst = 0.0
print(f"{'span':<28} {'field':<5} {'basic ms':>10} {preset + ' ms':>12} {'diff %':>8}  (median of {rounds} rounds)")
for key in sorted(names, key=lambda k: -runs[0][0][k]["self"]["total_ns"]):
    for field in ("busy", "self"):
        b = statistics.median(x[key][field]["total_ns"] for x, _ in runs)
        d = statistics.median(y[key][field]["total_ns"] for _, y in runs)
        diff = 100 * (d / b - 1) if b else 0.0
        worst = max(worst, abs(diff))
        print(f"{key[1]:<28} {field:<5} {b / 1e6:>10.1f} {d / 1e6:>12.1f} {diff:>+8.2f}")
print(f"largest difference: {worst:.2f} % (limit 5 %)")
sys.exit(0 if worst <= 5.0 else 1)
PY
