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
#
#   scripts/compare_pairs.sh                   # LOAD="idle busy" PAIRS=10 RUNS=3 SLOWDOWN=20
#   LOAD=busy PAIRS=3 scripts/compare_pairs.sh
#
# LOAD=busy starts one spinning process per core (`nproc`) for the runs and kills them after.
# Needs python3 (reads `compare --format json`).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-1}
SLOWDOWN=${SLOWDOWN:-20}
LOAD=${LOAD:-idle busy}

cargo build --quiet --release --features cli --example training_loop --bin spanprof
example=target/release/examples/training_loop
spanprof=target/release/spanprof
dir=$(mktemp -d)
spinners=()
stop_load() {
  if [ ${#spinners[@]} -gt 0 ]; then kill "${spinners[@]}" 2>/dev/null || true; fi
  spinners=()
}
trap 'stop_load; rm -rf "$dir"' EXIT

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

# Compares the profiles of $2 (baseline globs) with $3 and prints one table row; appends
# "<kind> <flagged 0/1> <names forward 0/1>" to $dir/tally.
row() {
  local label=$1 kind=$2 status=0 json
  shift 2
  json=$("$spanprof" compare --format json "$@") || status=$?
  printf '%s' "$json" | python3 -c '
import json, sys
label, kind, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(sys.stdin)
fwd = next((t for t in c["timings"] if t["name"] == "forward"), None)
pct = lambda x: "—" if x is None else f"{x:+.1f} %"
rw = c["run_wide"]
flagged = c["result"].removeprefix("REGRESSION in ") if c["regressed"] else "—"
print(f"| {label} | {pct(fwd and fwd[\"change_pct\"])} | {pct(fwd and fwd[\"relative_change_pct\"])} "
      f"| {fwd and fwd[\"evidence\"][\"decided_by\"]} | {pct(rw[\"change_pct\"])} {rw[\"evidence\"][\"decided_by\"]} "
      f"| {status} | {flagged} |")
names_forward = any(t["name"] == "forward" and t["verdict"] == "regression" for t in c["timings"])
with open(sys.argv[4], "a") as tally:
    tally.write(f"{kind} {int(status == 1)} {int(names_forward)}\n")
' "$label" "$kind" "$status" "$dir/tally"
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
      row "$i: 1 vs 1, $kind" "1-$kind" "${base[0]}" "${new[0]}"
    done
  done
  stop_load
  echo
  python3 - "$dir/tally" "$load" "$RUNS" "$SLOWDOWN" <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1])]
load, runs, slowdown = sys.argv[2:5]
for n in (runs, "1"):
    same = [r for r in rows if r[0] == f"{n}-same"]
    slow = [r for r in rows if r[0] == f"{n}-slow"]
    print(f"- {load}, {n} run(s) per side: identical flagged {sum(int(r[1]) for r in same)}/{len(same)}; "
          f"--slowdown {slowdown} caught naming forward {sum(int(r[1]) and int(r[2]) for r in slow)}/{len(slow)}")
EOF
done
