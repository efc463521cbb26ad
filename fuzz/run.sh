#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (#13). The targets are tests (`fuzz_*`, driven
# by src/fuzz.rs on stable Rust), in the crate or, for Parquet, in tests/hostile.rs, where
# each input runs the real binary: each replays fuzz/corpus/<target>/ and
# then mutates it for FUZZ_SECONDS. A failing input is saved under fuzz/crashes/<target>/
# and the script exits 1; once fixed, commit the input to fuzz/corpus/<target>/, where every
# `cargo test` replays it.
#
#   fuzz/run.sh                          # every target, 60 s each
#   FUZZ_SECONDS=600 fuzz/run.sh         # longer
#   fuzz/run.sh jsonl gate               # some targets only
#   FUZZ_SEED=12345 fuzz/run.sh ingest   # replay the run a failure names
set -uo pipefail
cd "$(dirname "$0")/.."

# target → the cargo test target and the test's name in it.
declare -A TEST=(
  [jsonl]="--lib ingest::jsonl::tests::fuzz_jsonl"
  [logfmt]="--lib ingest::logfmt::tests::fuzz_logfmt"
  [otlp]="--lib ingest::otlp::tests::fuzz_otlp"
  [zipkin]="--lib ingest::zipkin::tests::fuzz_zipkin"
  [ingest]="--lib ingest::tests::fuzz_ingest"
  [parquet]="--test hostile fuzz_parquet"
  [partial]="--test hostile fuzz_partial"
  [gate]="--lib gate::condition::tests::fuzz_gate"
  [policy]="--lib policy::tests::fuzz_policy"
)
TARGETS=(jsonl logfmt otlp zipkin ingest gate policy parquet partial)
[ $# -gt 0 ] && TARGETS=("$@")
export FUZZ_SECONDS=${FUZZ_SECONDS:-60}

cargo test --release --lib --test hostile --no-run || exit 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for target in "${TARGETS[@]}"; do
  spec=${TEST[$target]:-}
  if [ -z "$spec" ]; then
    echo "fuzz: unknown target '$target' (targets: ${!TEST[*]})" >&2
    exit 2
  fi
  echo "fuzz: $target for $FUZZ_SECONDS s" >&2
  # "--lib NAME" or "--test TARGET NAME".
  read -r kind first second <<<"$spec"
  if [ "$kind" = --lib ]; then which=(--lib); name=$first; else which=("$kind" "$first"); name=$second; fi
  if cargo test -q --release "${which[@]}" -- --exact "$name" --nocapture >"$log" 2>&1; then
    # A target that ran no test (renamed, moved) fuzzed nothing: that is a failure.
    if ! grep -E '^fuzz ' "$log" >&2; then
      status=1
      echo "fuzz: $target ran no fuzz test ($spec): fix its line in fuzz/run.sh" >&2
    fi
  else
    status=1
    grep -E 'fuzz target|FUZZ_SEED|panicked' "$log" >&2 || cat "$log" >&2
  fi
done
exit $status
