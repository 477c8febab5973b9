#!/usr/bin/env bash
# No distortion: a preset must not move the figures of other spans. Each round runs the
# training example once at `basic` and once at `detailed` (or $PRESET) side by side, both pinned
# to one CPU (`taskset -c 0`: each is preempted by the other, also inside spanprof's system
# calls, and both see the same load from the rest of the machine). Per span name with at least
# 1% of the self time, it compares busy and self time within each round, as shares of the run's
# self time (CHECK=absolute: the times themselves), and averages the differences over the rounds
# (the geometric mean of the ratios).
# A name is distorted when its mean difference is over 5% and outside the confidence interval
# of the rounds' spread. The check tests every name at once: at 95% per name, a run without
# any distortion flags some name with a chance of up to 1 - 0.95^m (23% for m = 5 names). It
# exits 1 if a name is distorted at 95% for the whole family of names (Bonferroni: each name's
# interval at 1 - 0.05/m); the 95% per-name verdict is printed beside it (STRICT=1 exits on
# that one instead).
# RUST_LOG defaults to `debug`: the per-layer `linear` spans too.
# PRESET=basic checks the check (basic against itself); SPANPROF_CPU_CLOCK=thread the fallback
# CPU clock; KEEP=1 keeps the profiles. EXAMPLE=async runs the async server instead (four
# workers, its client and its spans' polls on the shared CPU; REQUESTS and RATE as in
# `scripts/example-overhead.sh`).
#
#   scripts/distortion.sh                  # 6 rounds, basic vs detailed, 6 epochs
#   ROUNDS=8 EPOCHS=10 PRESET=full scripts/distortion.sh
#   EXAMPLE=async ROUNDS=8 scripts/distortion.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "SKIPPED: taskset is not installed (util-linux)" >&2; exit 0; }
taskset -c 0 true 2>/dev/null || { echo "SKIPPED: this machine does not allow pinning to CPU 0" >&2; exit 0; }
rounds=${ROUNDS:-6}
preset=${PRESET:-detailed}
epochs=${EPOCHS:-6}
export RUST_LOG=${RUST_LOG:-debug}
case ${EXAMPLE:-training} in
  training) name=training_loop; args=(--epochs "$epochs") ;;
  async) name=async_server; args=(--requests "${REQUESTS:-24000}" --rate "${RATE:-12}") ;;
  *) echo "EXAMPLE is training or async" >&2; exit 2 ;;
esac
cargo build -q --release --example "$name"
bin=target/release/examples/$name
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "runs kept in $tmp" >&2 || trap 'rm -rf "$tmp"' EXIT
run() { # round preset side(base|other): one run on CPU 0, in the background
  mkdir -p "$tmp/$3/$1"
  SPANPROF=$2 SPANPROF_REPORT=off SPANPROF_MAX_OVERHEAD=off taskset -c 0 "$bin" "${args[@]}" --out "$tmp/$3/$1" >/dev/null 2>&1 &
}
for r in $(seq "$rounds"); do
  # Side by side on CPU 0: each preempts the other, also inside spanprof's system calls, and
  # both see the same load from the rest of the machine. Which one starts first alternates.
  if [ $((r % 2)) = 1 ]; then run "$r" basic base; a=$!; run "$r" "$preset" other; b=$!
  else run "$r" "$preset" other; a=$!; run "$r" basic base; b=$!; fi
  wait "$a" "$b"
done
python3 - "$tmp" "$preset" "${CHECK:-share}" "${STRICT:-}" <<'PY'
import glob, json, math, statistics, sys
tmp, preset, check, strict = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
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
def t_quantile(p, df):
    """Student's t quantile, p > 0.5: bisection on the CDF (Simpson's rule on the density)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    def cdf(x, n=2000):
        f = lambda t: c * (1 + t * t / df) ** (-(df + 1) / 2)
        h = x / n
        return 0.5 + h / 3 * (f(0) + f(x) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n)))
    lo, hi = 0.0, 100.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2
family = 1 - 0.05 / len(names)
failed, failed_each = [], []
print(f"{'span':<18} {'field':<5} {'basic ms':>9} {preset + ' ms':>12} {'diff %':>8} {'95% CI':>17}  {'verdict':<18}"
      f" {f'{100 * family:.2f}% CI':>17}  verdict (family of {len(names)} names)")
def verdict(mean, lo, hi):
    # A distortion: a difference over 5 % that the runs' own spread does not explain.
    if abs(mean) > 0.05 and (lo > 0 or hi < 0):
        return "DISTORTED"
    return "ok" if abs(mean) <= 0.05 else "noise (CI holds 0)"
for key in sorted(names, key=lambda k: -first[k]["self"]["total_ns"]):
    for field in ("busy", "self"):
        # Each round's pair ran at the same time, under the same load: compare within rounds.
        # On a log scale: which run of a round starts first alternates, and a ratio and its
        # inverse must cancel out.
        logs = [math.log(value(other[r], key, field) / value(base[r], key, field))
                for r in rounds if value(base[r], key, field) > 0 and value(other[r], key, field) > 0]
        mean_log = statistics.mean(logs)
        sem = statistics.stdev(logs) / math.sqrt(len(logs))
        mean = math.exp(mean_log) - 1
        cis = [tuple(100 * (math.exp(mean_log + s * t_quantile(p, len(logs) - 1) * sem) - 1) for s in (-1, 1))
               for p in (0.975, 1 - (1 - family) / 2)]
        verdicts = [verdict(mean, lo / 100, hi / 100) for lo, hi in cis]
        if verdicts[0] == "DISTORTED":
            failed_each.append(f"{key[1]} {field}")
        if verdicts[1] == "DISTORTED":
            failed.append(f"{key[1]} {field}")
        b = statistics.median(base[r][key][field]["total_ns"] for r in rounds)
        d = statistics.median(other[r][key][field]["total_ns"] for r in rounds)
        print(f"{key[1]:<18} {field:<5} {b / 1e6:>9.1f} {d / 1e6:>12.1f} {100 * mean:>+8.2f}"
              + "".join(f" {f'[{lo:+.1f}, {hi:+.1f}]':>17}  {v:<18}" for (lo, hi), v in zip(cis, verdicts)))
print(f"(differences of the {check} of the run's self time, mean over {len(rounds)} rounds of one run"
      f" of each preset side by side on CPU 0; ms: medians)")
ov = [json.load(open(f)).get("overhead") or {} for f in glob.glob(f"{tmp}/other/*/profile.json")]
print(f"{preset}: spanprof's readings {statistics.median(x.get('readings_ns', 0) for x in ov) / 1e6:.1f} ms "
      f"per run (median), kept out of the spans; CPU clock: "
      f"{sorted(set(x.get('cpu_clock', '?') for x in ov))}")
print(f"distorted beyond 5 % at 95 % per name: {', '.join(failed_each) or 'none'}")
print(f"distorted beyond 5 % at 95 % for the family of {len(names)} names (Bonferroni): {', '.join(failed) or 'none'}")
sys.exit(1 if (failed_each if strict else failed) else 0)
PY
