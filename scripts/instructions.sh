#!/usr/bin/env bash
# Instructions per span of spanprof and of the registry floor, counted by valgrind's callgrind:
# a figure that does not move with the machine's load. Only the spans' loop is counted
# (`--toggle-collect`: set-up, clock calibration and the final snapshot stay out), at two span
# counts; the difference divided by the difference in spans cancels first-use costs.
#
#   scripts/instructions.sh                # every case, 20 000 and 40 000 spans
#   SPANS_A=50000 SPANS_B=100000 scripts/instructions.sh basic floor
#   scripts/instructions.sh event_floor event_plain event_metric   # per event (one a loop)
#   scripts/instructions.sh scoped_in filtered_in scoped_out filtered_out
#       # a span-directive filter (`[outer]=info`), spanprof's own against tracing-subscriber's
#       # per-layer `Filtered`, for spans inside `outer` (recorded) and outside (excluded)
#   BIN=/tmp/instructions-main scripts/instructions.sh   # another build of the bench
#   FEATURES=cuda scripts/instructions.sh basic gpu_none gpu_other gpu_timed
#       # GPU time per span against the fake CUDA driver (built here from tests/fake_cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need valgrind
a=${SPANS_A:-20000}
b=${SPANS_B:-40000}
cases=("$@")
# `sampled` is not among the defaults: under valgrind the back-off sees the program slowed
# down and may step N back during the loop (the bench then stops and says so): ask for it
# by name, or see the ratios bench for a span left out.
[ ${#cases[@]} -gt 0 ] || cases=(floor basic notree excluded off detailed nested_floor nested nested_notree
  scoped_in filtered_in scoped_out filtered_out)
bin=$(instructions_bin)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${FEATURES:-}" ] && [[ " ${cases[*]} " == *" gpu_"* ]]; then
  need cc
  cc -shared -fPIC -O2 -o "$tmp/libcuda.so.1" tests/fake_cuda/fake_cuda.c -lpthread -ldl
  export CUDA_LIB="$tmp/libcuda.so.1"
fi
count() { # case spans -> total instructions
  CASE=$1 SPANS=$2 valgrind --tool=callgrind --toggle-collect='*measured_spans*' \
    --callgrind-out-file="$tmp/out" "$bin" --bench >/dev/null 2>"$tmp/log" \
    || { cat "$tmp/log" >&2; exit 1; }
  grep -Eo 'Collected : [0-9]+' "$tmp/log" | grep -Eo '[0-9]+$'
}
printf '%-14s %14s\n' case 'instr/span'
declare -A per
for c in "${cases[@]}"; do
  ia=$(count "$c" "$a")
  ib=$(count "$c" "$b")
  spans=$((b - a))
  case $c in nested*) spans=$((3 * spans)) ;; esac
  per[$c]=$(( (ib - ia) / spans ))
  printf '%-14s %14d\n' "$c" "${per[$c]}"
done
if [ -n "${per[floor]:-}" ] && [ -n "${per[basic]:-}" ]; then
  echo "spanprof basic adds $(( per[basic] - per[floor] )) instructions per flat span over the floor"
fi
for w in in out; do
  own=${per[scoped_$w]:-} filtered=${per[filtered_$w]:-}
  if [ -n "$own" ] && [ -n "$filtered" ]; then
    echo "[outer]=info, spans $w: spanprof's own filter $own, Filtered $filtered" \
      "($(( 100 * (filtered - own) / own ))% more)"
  fi
done
