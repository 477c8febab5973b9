#!/usr/bin/env bash
# How often `spanprof compare` flags identical runs, and how often it catches a real change, on
# this machine idle and with every core kept busy by a load this script starts and stops.
#
# For each of PAIRS pairs it runs the training example RUNS times normally (the baseline),
# RUNS times with `--slowdown SLOWDOWN` (the forward pass that much slower: must be flagged,
# naming `forward`) and RUNS times normally again (must not be flagged), interleaved so a drift
# of the machine's speed hits every kind alike. It compares them RUNS against RUNS and, with the
# first run of each, one against one, and prints a row per comparison and the rates:
#
#   identical flagged: the comparisons of two normal sets that exited 1 (false alarms)
#   slowdown caught:   the comparisons against the slowed set that exited 1 naming `forward`
#                      (the span name, or a call path ending in it)
#
#   scripts/compare_pairs.sh       # LOAD="idle busy" PAIRS=10 RUNS=3 SLOWDOWN=20 THRESHOLDS="15 10"
#   LOAD=busy PAIRS=3 scripts/compare_pairs.sh
#
# Each comparison is judged at each of THRESHOLDS (%): the default 15, and 10, a threshold half
# the slowdown to catch (a threshold near the change to catch misses it half the time).
#
# LOAD=busy starts one spinning process per core (`nproc`) for the runs and kills them after.
# KEEP=DIR keeps the profiles there (DIR/LOAD-PAIR-KINDRUN/profile.json) for a later look.
# Needs python3 (reads `compare --format json`).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-1}
SLOWDOWN=${SLOWDOWN:-20}
LOAD=${LOAD:-idle busy}
THRESHOLDS=${THRESHOLDS:-15 10}

cargo build --quiet --release --features cli --example training_loop --bin spanprof
example=target/release/examples/training_loop
spanprof=target/release/spanprof
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"
spinners=()
stop_load() {
  if [ ${#spinners[@]} -gt 0 ]; then kill "${spinners[@]}" 2>/dev/null || true; fi
  spinners=()
}
trap 'stop_load; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

start_load() {
  for _ in $(seq 1 "$(nproc)"); do
    (while :; do :; done) &
    spinners+=($!)
  done
}

# One profiled run into $1/profile.json; further arguments go to the example.
train() {
  local out=$1
  shift
  SPANPROF_REPORT=off "$example" --epochs "$EPOCHS" --out "$out" "$@" >/dev/null 2>&1
}

# Compares the profiles given (`compare` arguments) at each threshold and prints one table row
# per threshold; appends "<kind> <threshold> <flagged 0/1> <names forward 0/1>" to $dir/tally.
row() {
  local label=$1 kind=$2 status json threshold
  shift 2
  for threshold in $THRESHOLDS; do
  status=0
  json=$("$spanprof" compare --threshold "$threshold%" --format json "$@") || status=$?
  printf '%s' "$json" | python3 -c '
import json, sys
label, kind, status = sys.argv[1] + ", " + sys.argv[5] + " %", sys.argv[2] + " " + sys.argv[5], int(sys.argv[3])
c = json.load(sys.stdin)
fwd = next((t for t in c["timings"] if t["name"] == "forward"), None) or {}
pct = lambda x: "—" if x is None else f"{x:+.1f} %"
rw = c["run_wide"]
flagged = c["result"].removeprefix("REGRESSION in ") if c["regressed"] else "—"
change, beside = pct(fwd.get("change_pct")), pct(fwd.get("relative_change_pct"))
decided = fwd.get("evidence", {}).get("decided_by", "—")
shift = pct(rw["change_pct"]) + " " + rw["evidence"]["decided_by"]
print(f"| {label} | {change} | {beside} | {decided} | {shift} | {status} | {flagged} |")
# `forward`, or a call path of it (`train;epoch;train_step;forward`).
names_forward = any(t["name"].split(";")[-1] == "forward" and t["verdict"] == "regression"
                    for t in c["timings"] + c["paths"])
with open(sys.argv[4], "a") as tally:
    tally.write(f"{kind} {int(status == 1)} {int(names_forward)}\n")
' "$label" "$kind" "$status" "$dir/tally" "$threshold"
  done
}

for load in $LOAD; do
  rm -f "$dir/tally"
  [ "$load" = busy ] && start_load
  echo
  echo "### $load machine ($(nproc) cores$([ "$load" = busy ] && echo ", $(nproc) spinning processes")), $PAIRS pairs, --slowdown $SLOWDOWN"
  echo
  echo "| comparison | forward change | beside run | decided by | run-wide shift | exit | flagged |"
  echo "|---|--:|--:|---|---|--:|---|"
  for i in $(seq 1 "$PAIRS"); do
    for r in $(seq 1 "$RUNS"); do
      train "$dir/$load-$i-base$r"
      train "$dir/$load-$i-slow$r" --slowdown "$SLOWDOWN"
      train "$dir/$load-$i-same$r"
    done
    for kind in slow same; do
      base=() new=()
      for r in $(seq 1 "$RUNS"); do
        base+=("$dir/$load-$i-base$r/profile.json")
        new+=("$dir/$load-$i-$kind$r/profile.json")
      done
      row "$i: $RUNS vs $RUNS, $kind" "$RUNS-$kind" "${base[@]}" -- "${new[@]}"
      if [ "$RUNS" -gt 1 ]; then row "$i: 1 vs 1, $kind" "1-$kind" "${base[0]}" "${new[0]}"; fi
    done
  done
  stop_load
  echo
  python3 - "$dir/tally" "$load" "$RUNS" "$SLOWDOWN" $THRESHOLDS <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1])]
load, runs, slowdown = sys.argv[2:5]
for threshold in sys.argv[5:]:
    for n in dict.fromkeys((runs, "1")):
        same = [r for r in rows if r[0] == f"{n}-same" and r[1] == threshold]
        slow = [r for r in rows if r[0] == f"{n}-slow" and r[1] == threshold]
        print(f"- {load}, {n} run(s) per side, threshold {threshold} %: identical flagged "
              f"{sum(int(r[2]) for r in same)}/{len(same)}; --slowdown {slowdown} caught naming "
              f"forward {sum(int(r[2]) and int(r[3]) for r in slow)}/{len(slow)}")
EOF
done
