#!/usr/bin/env bash
# The commands side by side on the same events (#13, #14): `analyze` on JSON Lines (the
# reference), `analyze` on the same events as Parquet (read by the worker process), and
# `replay` under a candidate policy, with each one's ratio to the reference.
#
#   bench/commands.sh                                 # 1M operations, 3 rounds
#   OPS=100000 ROUNDS=5 bench/commands.sh
#   BEFORE=/path/to/old/attempt-funnel bench/commands.sh  # also time another build
#
# Environment:
#   OPS        operations generated (`attempt-funnel generate --ops OPS --seed 1`; 1000000)
#   ROUNDS     rounds, the command order rotated each round; medians reported (3)
#   CANDIDATE  the replay's candidate policy (fixtures/candidates/recommended.toml)
#   BEFORE     another attempt-funnel binary (an older commit's build): its `analyze` on
#              the same Parquet file is timed too, for a before/after figure
#
# The Parquet file is written by Polars from bench/.venv (bench/run.sh creates it; or
# `python3 -m venv bench/.venv && bench/.venv/bin/pip install -r bench/requirements.txt`).
# Prints a Markdown table: median wall seconds, median CPU seconds (user + system, the
# worker process included), median peak RSS, and the ratios to `analyze` on JSON Lines.
set -euo pipefail
cd "$(dirname "$0")/.."

OPS=${OPS:-1000000}
ROUNDS=${ROUNDS:-3}
CANDIDATE=${CANDIDATE:-fixtures/candidates/recommended.toml}
BEFORE=${BEFORE:-}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
PY=bench/.venv/bin/python
DATA=bench/data/commands
mkdir -p "$DATA"
die() { echo "bench: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "needs GNU time (apt-get install time)"
"$PY" -c 'import polars' 2>/dev/null || die "needs Polars in $PY to write the Parquet file (see the header of this script)"
cargo build --release --quiet

events=$DATA/events-$OPS.jsonl
parquet=$DATA/events-$OPS.parquet
if [ ! -s "$parquet" ] || [ "$BIN" -nt "$parquet" ]; then
  echo "bench: generating $OPS operations into $events and $parquet" >&2
  "$BIN" generate --ops "$OPS" --seed 1 -o "$events" 2>/dev/null
  "$PY" -c 'import polars as pl, sys; pl.read_ndjson(sys.argv[1], infer_schema_length=None).write_parquet(sys.argv[2])' \
    "$events" "$parquet"
fi

declare -A COMMAND=(
  [analyze-jsonl]="$BIN analyze --format csv -o /dev/null $events"
  [analyze-parquet]="$BIN analyze --format csv -o /dev/null $parquet"
  [replay-jsonl]="$BIN replay --candidate $CANDIDATE --format json -o /dev/null $events"
)
labels=(analyze-jsonl analyze-parquet replay-jsonl)
if [ -n "$BEFORE" ]; then
  COMMAND[analyze-parquet-before]="$BEFORE analyze --format csv -o /dev/null $parquet"
  labels+=(analyze-parquet-before)
fi

raw=$DATA/raw.tsv
: >"$raw"
for ((round = 1; round <= ROUNDS; round++)); do
  shift_by=$(((round - 1) % ${#labels[@]}))
  for label in "${labels[@]:shift_by}" "${labels[@]:0:shift_by}"; do
    # shellcheck disable=SC2086 # the command is split into words on purpose
    /usr/bin/time -o "$DATA/time.txt" -f '%e %U %S %M' ${COMMAND[$label]} >/dev/null 2>"$DATA/stderr.txt" ||
      { cat "$DATA/stderr.txt" >&2; die "$label failed"; }
    read -r wall user sys kib < <(tail -n 1 "$DATA/time.txt")
    printf '%s\t%s\t%s\t%s\n' "$label" "$wall" "$(echo "$user + $sys" | bc)" "$kib" >>"$raw"
    echo "bench: round $round $label ${wall}s" >&2
  done
done

python3 - "$raw" "$OPS" "$(wc -l <"$events")" "${labels[@]}" <<'PY'
import statistics, sys
raw, ops, events, labels = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [line.split("\t") for line in open(raw).read().splitlines()]
med = {l: [statistics.median(float(r[i]) for r in rows if r[0] == l) for i in (1, 2, 3)] for l in labels}
ref = med["analyze-jsonl"]
print(f"{int(ops):,} operations, {int(events):,} events; median of {len(rows) // len(labels)} rounds")
print()
print("| command | wall s | CPU s | peak MB | wall ÷ analyze JSONL | CPU ÷ analyze JSONL |")
print("|---|---:|---:|---:|---:|---:|")
for l in labels:
    wall, cpu, kib = med[l]
    print(f"| {l} | {wall:.2f} | {cpu:.2f} | {kib / 1024:.0f} | {wall / ref[0]:.2f}× | {cpu / ref[1]:.2f}× |")
PY
