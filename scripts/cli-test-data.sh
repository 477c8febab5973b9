#!/usr/bin/env bash
# Makes the input profiles of tests/it/cli.rs with the training example (one epoch each):
# tests/data/cli-base.json and cli-base2.json (normal runs), cli-slow.json and cli-slow2.json
# (`--slowdown 20`), cli-detailed.json (`SPANPROF=detailed`: resources per span). The host
# and command line are replaced with fixed values. Refresh the golden outputs afterwards:
#   SPANPROF_BLESS=1 cargo test --features cli --test it cli::
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --features cli --example training_loop
example=target/release/examples/training_loop
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
profile_run() {
  local name=$1
  shift
  env SPANPROF_REPORT=off "$@" --epochs 1 --out "$tmp/$name" >/dev/null 2>&1
  python3 - "$tmp/$name/profile.json" "tests/data/cli-$name.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["run"]["host"] = "ci-host"
p["run"]["command_line"] = ["training_loop", "--epochs", "1"]
json.dump(p, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
PY
}
profile_run base "$example"
profile_run slow "$example" --slowdown 20
profile_run base2 "$example"
profile_run slow2 "$example" --slowdown 20
profile_run detailed SPANPROF=detailed "$example"
ls -l tests/data/cli-*.json
