#!/usr/bin/env bash
# Locked instructions (`lock`-prefixed read-modify-writes, and `xchg` with memory, which locks
# implicitly) executed per span, counted by valgrind's callgrind on the instructions bench's
# timed loop, as `scripts/instructions.sh` counts instructions: at two span counts, the
# difference divided by the difference in spans. The floor's own (sharded-slab's reference
# counts) are in every case; what spanprof adds is the difference to `floor`.
#
#   scripts/locked.sh                      # floor, basic, notree, nested_floor, nested
#   SPANS_A=2000 SPANS_B=4000 scripts/locked.sh floor basic
#   BIN=/tmp/instructions-main scripts/locked.sh   # another build of the bench
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need valgrind objdump
a=${SPANS_A:-2000}
b=${SPANS_B:-4000}
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(floor basic notree nested_floor nested)
bin=$(instructions_bin)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Addresses of the binary's locked instructions.
objdump -d --no-show-raw-insn "$bin" \
  | awk '/^ *[0-9a-f]+:\t(lock |xchg .*\()/ { sub(":", "", $1); print "0x" $1 }' >"$tmp/locked"
count() { # case spans -> locked instructions executed in the timed loop
  CASE=$1 SPANS=$2 valgrind --tool=callgrind --dump-instr=yes --compress-pos=no \
    --compress-strings=no --toggle-collect='*measured_spans*' \
    --callgrind-out-file="$tmp/out" "$bin" --bench >/dev/null 2>"$tmp/log" \
    || { cat "$tmp/log" >&2; exit 1; }
  awk -v bin="$(realpath "$bin")" '
    NR == FNR { locked[$1] = 1; next }
    /^ob=/ { ours = (substr($0, 4) == bin); next }
    /^calls=/ { skip = 1; next }
    /^0x/ { if (skip) { skip = 0; next } if (ours && ($1 in locked)) n += $3; next }
    END { print n + 0 }' "$tmp/locked" "$tmp/out"
}
printf '%-14s %14s\n' case 'locked/span'
for c in "${cases[@]}"; do
  la=$(count "$c" "$a")
  lb=$(count "$c" "$b")
  spans=$((b - a))
  case $c in nested*) spans=$((3 * spans)) ;; esac
  printf '%-14s %14s\n' "$c" "$(awk -v d=$((lb - la)) -v s=$spans 'BEGIN { printf "%.2f", d / s }')"
done
