#!/usr/bin/env bash
# `spanprof compare` on pairs of training runs: PAIRS pairs of a normal run against a run with
# `--slowdown SLOWDOWN` (must be flagged, naming `forward`), and PAIRS pairs of two normal runs
# (must not be flagged). Then one comparison of several runs per side (RUNS against RUNS, the
# noise rule). Prints Markdown tables of the figures: the forward pass's p50 on each side, the
# change, the largest change of another span name and of another call path, the exit status and
# the span names and call paths flagged.
#
#   scripts/compare_pairs.sh                 # PAIRS=10 EPOCHS=1 SLOWDOWN=20 RUNS=5
#   PAIRS=3 EPOCHS=2 scripts/compare_pairs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10}
EPOCHS=${EPOCHS:-1}
SLOWDOWN=${SLOWDOWN:-20}
RUNS=${RUNS:-5}

cargo build --quiet --release --features cli --example training_loop --bin spanprof
example=target/release/examples/training_loop
spanprof=target/release/spanprof
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One profiled run into $1/profile.json; further arguments go to the example.
train() {
  local out=$1
  shift
  SPANPROF_REPORT=off "$example" --epochs "$EPOCHS" --out "$out" "$@" >/dev/null 2>&1
}

# Compares $1 with $2 and prints one table row: forward's base, new, change, the exit status
# and the names flagged.
row() {
  local label=$1 base=$2 new=$3 status=0 text
  text=$("$spanprof" compare "$base" -- "$new") || status=$?
  local forward flagged
  forward=$(printf '%s\n' "$text" | awk -F '  +' '$1 == "forward" { print $3 " | " $4 " | " $5 " | " $8; exit }')
  flagged=$(printf '%s\n' "$text" | sed -n 's/^result: REGRESSION in //p')
  # The largest change of another span name judged on timing (enough calls): the noise; and
  # the largest change of a call path not ending in forward (the table after "timing per call
  # path"), the noise of the paths.
  other=$(largest "$text" names)
  path=$(largest "$text" paths)
  printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$forward" "$other" "${path:-—}" "$status" "${flagged:-—}"
}

# The row of $1's timing tables ($2: names or paths) with the largest change, forward's
# excepted, among those judged (enough calls).
largest() {
  printf '%s\n' "$1" | awk -F '  +' -v want="$2" '
    /^timing per span name/ { table = "names" }
    /^timing per call path/ { table = "paths" }
    /^$/ { if (table != "") done[table] = 1 }
    table == want && !done[want] && NF >= 8 && $1 != "name" && $1 != "path" && $8 != "too few calls" {
      n = split($1, parts, ";")
      if (parts[n] == "forward") next
      c = $5; sub(/ %/, "", c); c = c + 0; a = c < 0 ? -c : c
      if (row == "" || a > best) { best = a; row = $1 " " $5 }
    }
    END { print row }'
}

echo "| pair | forward p50 base | forward p50 new | change | verdict | largest other change | largest other path change | exit | flagged |"
echo "|---|--:|--:|--:|---|---|---|--:|---|"
for i in $(seq 1 "$PAIRS"); do
  # Interleaved, so a drift of the machine's speed hits both kinds alike.
  train "$dir/base$i"
  train "$dir/slow$i" --slowdown "$SLOWDOWN"
  train "$dir/same$i"
  row "$i: normal vs --slowdown $SLOWDOWN" "$dir/base$i/profile.json" "$dir/slow$i/profile.json"
  row "$i: normal vs normal" "$dir/base$i/profile.json" "$dir/same$i/profile.json"
done

echo
echo "Several runs per side ($RUNS against $RUNS, the noise rule):"
echo
base=() same=() slow=()
for i in $(seq 1 "$RUNS"); do
  base+=("$dir/base$i/profile.json")
  slow+=("$dir/slow$i/profile.json")
  j=$((i + RUNS))
  if [ -f "$dir/same$j/profile.json" ]; then same+=("$dir/same$j/profile.json"); else
    train "$dir/more$i"; same+=("$dir/more$i/profile.json"); fi
done
for kind in slow same; do
  declare -n new=$kind
  status=0
  text=$("$spanprof" compare "${base[@]}" -- "${new[@]}") || status=$?
  printf '%s\n' "$text" | awk -F '  +' -v kind="$kind" -v status="$status" '
    $1 == "forward" { printf "- %s: forward p50 %s -> %s (%s), spreads %s / %s: %s; exit %s\n", kind, $3, $4, $5, $6, $7, $8, status }'
  printf '%s\n' "$text" | grep '^result:' | sed 's/^/  /'
done
