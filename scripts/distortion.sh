#!/usr/bin/env bash
# No distortion: a preset must not move the figures of other spans. Each round runs the
# training example once at `basic` and once at `detailed` (or $PRESET) side by side, both pinned
# to one CPU (`taskset -c 0`: each is preempted by the other, also inside spanprof's system
# calls, and both see the same load from the rest of the machine). Per span name with at least
# 1% of the self time, it compares busy and self time within each round, as shares of the run's
# self time (CHECK=absolute: the times themselves), and averages the differences over the rounds
# (the geometric mean of the ratios).
# Exits 1 if a name's mean difference is over 5% and outside the 95% confidence interval of
# the rounds' spread. RUST_LOG defaults to `debug`: the per-layer `linear` spans too.
# PRESET=basic checks the check (basic against itself); SPANPROF_CPU_CLOCK=thread the fallback
# CPU clock; KEEP=1 keeps the profiles.
#
#   scripts/distortion.sh                  # 6 rounds, basic vs detailed, 6 epochs
#   ROUNDS=8 EPOCHS=10 PRESET=full scripts/distortion.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "SKIPPED: taskset is not installed (util-linux)" >&2; exit 0; }
taskset -c 0 true 2>/dev/null || { echo "SKIPPED: this machine does not allow pinning to CPU 0" >&2; exit 0; }
rounds=${ROUNDS:-6}
preset=${PRESET:-detailed}
epochs=${EPOCHS:-6}
export RUST_LOG=${RUST_LOG:-debug}
cargo build -q --release --example training_loop
bin=target/release/examples/training_loop
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "runs kept in $tmp" >&2 || trap 'rm -rf "$tmp"' EXIT
run() { # round preset side(base|other): one run on CPU 0, in the background
  mkdir -p "$tmp/$3/$1"
  SPANPROF=$2 SPANPROF_REPORT=off SPANPROF_MAX_OVERHEAD=off taskset -c 0 "$bin" --epochs "$epochs" --out "$tmp/$3/$1" >/dev/null 2>&1 &
}
for r in $(seq "$rounds"); do
  # Side by side on CPU 0: each preempts the other, also inside spanprof's system calls, and
  # both see the same load from the rest of the machine. Which one starts first alternates.
  if [ $((r % 2)) = 1 ]; then run "$r" basic base; a=$!; run "$r" "$preset" other; b=$!
  else run "$r" "$preset" other; a=$!; run "$r" basic base; b=$!; fi
  wait "$a" "$b"
done
python3 - "$tmp" "$preset" "${CHECK:-share}" <<'PY'
import glob, json, math, statistics, sys
tmp, preset, check = sys.argv[1], sys.argv[2], sys.argv[3]
def load(side):
    runs = {}
    for f in sorted(glob.glob(f"{tmp}/{side}/*/profile.json")):
        spans = json.load(open(f))["spans"]
        runs[f.split("/")[-2]] = {(s["target"], s["name"]): s for s in spans}
    return runs
base, other = load("base"), load("other")
rounds = sorted(set(base) & set(other), key=int)
if len(rounds) < 3:
    sys.exit(f"only {len(rounds)} rounds with both profiles: need 3 or more")
first = base[rounds[0]]
total = sum(s["self"]["total_ns"] for s in first.values())
names = [k for k, s in first.items() if s["self"]["total_ns"] >= total / 100]
def value(run, key, field):
    v = run[key][field]["total_ns"]
    return v / sum(s["self"]["total_ns"] for s in run.values()) if check == "share" else v
# Student's t, 97.5th percentile, by degrees of freedom (2..30; 2.0 beyond).
T = {2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
     12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}
def t975(df):
    return next((T[k] for k in sorted(T) if k >= df), 2.0)
failed = []
print(f"{'span':<18} {'field':<5} {'basic ms':>9} {preset + ' ms':>12} {'diff %':>8} {'95% CI':>17}  verdict")
for key in sorted(names, key=lambda k: -first[k]["self"]["total_ns"]):
    for field in ("busy", "self"):
        # Each round's pair ran at the same time, under the same load: compare within rounds.
        # On a log scale: which run of a round starts first alternates, and a ratio and its
        # inverse must cancel out.
        logs = [math.log(value(other[r], key, field) / value(base[r], key, field))
                for r in rounds if value(base[r], key, field) > 0 and value(other[r], key, field) > 0]
        mean_log = statistics.mean(logs)
        half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        mean = math.exp(mean_log) - 1
        lo, hi = 100 * (math.exp(mean_log - half) - 1), 100 * (math.exp(mean_log + half) - 1)
        # A distortion: a difference over 5 % that the runs' own spread does not explain.
        bad = abs(mean) > 0.05 and (lo > 0 or hi < 0)
        verdict = "DISTORTED" if bad else ("ok" if abs(mean) <= 0.05 else "noise (CI holds 0)")
        if bad:
            failed.append(f"{key[1]} {field}")
        b = statistics.median(base[r][key][field]["total_ns"] for r in rounds)
        d = statistics.median(other[r][key][field]["total_ns"] for r in rounds)
        print(f"{key[1]:<18} {field:<5} {b / 1e6:>9.1f} {d / 1e6:>12.1f} {100 * mean:>+8.2f}"
              f" {f'[{lo:+.1f}, {hi:+.1f}]':>17}  {verdict}")
print(f"(differences of the {check} of the run's self time, mean over {len(rounds)} rounds of one run"
      f" of each preset side by side on CPU 0; ms: medians)")
ov = [json.load(open(f)).get("overhead") or {} for f in glob.glob(f"{tmp}/other/*/profile.json")]
print(f"{preset}: spanprof's readings {statistics.median(x.get('readings_ns', 0) for x in ov) / 1e6:.1f} ms "
      f"per run (median), kept out of the spans; CPU clock: "
      f"{sorted(set(x.get('cpu_clock', '?') for x in ov))}")
if failed:
    print(f"distorted beyond 5 %: {', '.join(failed)}")
sys.exit(1 if failed else 0)
PY
