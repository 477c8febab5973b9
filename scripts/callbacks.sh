#!/usr/bin/env bash
# Where a span's instructions go, per callback: each of `Layered<_, Registry>`'s `new_span`,
# `enter`, `exit` and `try_close`, inclusive (the registry's work and the layer's), per span,
# for the floor and for a case, and the case's excess over the floor. Counted by valgrind's
# callgrind on the instructions bench's timed loop (`--toggle-collect`, as
# `scripts/instructions.sh`), at two span counts: the difference divided by the difference in
# spans, so that first-use costs cancel. docs/overhead.md ("Where the instructions go") quotes
# its output.
#
#   scripts/callbacks.sh                   # basic against floor, nested against nested_floor
#   scripts/callbacks.sh notree detailed   # flat cases against floor
#   BIN=/tmp/instructions-main scripts/callbacks.sh   # another build of the bench
#
# Nested cases (`nested*`) are per span of the three, against `nested_floor`; there a callback's
# inclusive count holds the callbacks it encloses of the span inside it (a close drops the
# parent's reference to its child), which the floor's count holds too: the excess is spanprof's.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need valgrind callgrind_annotate
a=${SPANS_A:-20000}
b=${SPANS_B:-40000}
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(basic nested)
bin=$(instructions_bin)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
callbacks=(new_span enter exit try_close)
# case spans -> "new_span enter exit try_close" inclusive totals
count() {
  CASE=$1 SPANS=$2 valgrind --tool=callgrind --toggle-collect='*measured_spans*' \
    --callgrind-out-file="$tmp/out" "$bin" --bench >/dev/null 2>"$tmp/log" \
    || { cat "$tmp/log" >&2; exit 1; }
  callgrind_annotate --inclusive=yes "$tmp/out" >"$tmp/annotated" 2>/dev/null
  local totals=()
  for cb in "${callbacks[@]}"; do
    # One line per function: "count (pct) file:function [binary]"; the layered subscriber's
    # callback is the only one of that name (the registry's is its own line).
    n=$(grep -E "Layered<L,S> as tracing_core::subscriber::Subscriber>::$cb( |$)" "$tmp/annotated" \
      | head -1 | awk '{gsub(",", "", $1); print $1}')
    [ -n "$n" ] || { echo "no $cb in callgrind's output for $1" >&2; exit 1; }
    totals+=("$n")
  done
  echo "${totals[*]}"
}
# case -> per-span inclusive counts of each callback
per_span() {
  local spans=$((b - a))
  case $1 in nested*) spans=$((3 * spans)) ;; esac
  read -r -a ta <<<"$(count "$1" "$a")"
  read -r -a tb <<<"$(count "$1" "$b")"
  local out=()
  for i in 0 1 2 3; do out+=($(( (tb[i] - ta[i]) / spans ))); done
  echo "${out[*]}"
}
declare -A done_floor
printf '%-20s %10s %10s %10s %10s %10s\n' case new_span enter exit try_close total
for c in "${cases[@]}"; do
  case $c in nested*) f=nested_floor ;; *) f=floor ;; esac
  if [ -z "${done_floor[$f]:-}" ]; then
    done_floor[$f]=$(per_span "$f")
    read -r -a fl <<<"${done_floor[$f]}"
    printf '%-20s %10d %10d %10d %10d %10d\n' "$f" "${fl[@]}" $((fl[0] + fl[1] + fl[2] + fl[3]))
  fi
  read -r -a fl <<<"${done_floor[$f]}"
  read -r -a cs <<<"$(per_span "$c")"
  printf '%-20s %10d %10d %10d %10d %10d\n' "$c" "${cs[@]}" $((cs[0] + cs[1] + cs[2] + cs[3]))
  printf '%-20s %+10d %+10d %+10d %+10d %+10d\n' "  over $f" $((cs[0] - fl[0])) $((cs[1] - fl[1])) \
    $((cs[2] - fl[2])) $((cs[3] - fl[3])) \
    $((cs[0] + cs[1] + cs[2] + cs[3] - fl[0] - fl[1] - fl[2] - fl[3]))
done
