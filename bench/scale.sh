#!/usr/bin/env bash
# The cost model of docs/scale.md, measured: partial sizes, merge time, and what
# `--partition K/N` costs (every worker parses every line).
#
#   bench/scale.sh                    # OPS=200000: about a million events
#   OPS=1000000 N=16 bench/scale.sh
#
# Needs GNU time (/usr/bin/time). Builds attempt-funnel unless ATTEMPT_FUNNEL names a binary.
# Prints Markdown tables: wall seconds, user CPU seconds, peak RSS (MB). The machine is
# shared: user CPU is the steadier figure.
set -euo pipefail
cd "$(dirname "$0")/.."

ops=${OPS:-200000}
n=${N:-8}
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/attempt-funnel-scale.XXXXXX")}
mkdir -p "$work"
if [ -n "${ATTEMPT_FUNNEL:-}" ]; then
  bin=$ATTEMPT_FUNNEL
else
  cargo build --release --quiet
  bin=${CARGO_TARGET_DIR:-target}/release/attempt-funnel
fi

input="$work/input.jsonl"
"$bin" generate --ops "$ops" --seed 1 -o "$input" 2> "$work/generate.txt"
events=$(wc -l < "$input")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

# `measure LABEL COMMAND…`: one table row from GNU time.
measure() {
  local label=$1
  shift
  /usr/bin/time -f '%e %U %M' -o "$work/time.txt" "$@" > /dev/null 2>> "$work/stderr.txt" || true
  read -r wall user rss < "$work/time.txt"
  printf '| %s | %s | %s | %s |\n' "$label" "$wall" "$user" "$(( rss / 1024 ))"
}

echo "attempt-funnel $("$bin" --version | cut -d' ' -f2), $ops operations, $events events, $(mb "$(stat -c %s "$input")") MB of JSON Lines; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
echo
echo "| run | wall s | user s | peak MB |"
echo "|---|---:|---:|---:|"
measure "analyze (one run)" "$bin" analyze --format jsonl "$input"
measure "analyze --format partial (one partial of everything)" \
  "$bin" analyze --format partial -o "$work/all.partial" "$input"
for k in 0 1; do
  measure "analyze --partition $k/$n --format partial" \
    "$bin" analyze --partition "$k/$n" --format partial -o "$work/part-$k.partial" "$input"
done
for k in $(seq 2 $((n - 1))); do
  "$bin" analyze --partition "$k/$n" --format partial -o "$work/part-$k.partial" "$input"
done
measure "merge of the $n partials (--format jsonl)" "$bin" merge --format jsonl "$work"/part-*.partial
measure "merge of the $n partials (--format table)" "$bin" merge "$work"/part-*.partial
measure "merge of the one partial (--format jsonl)" "$bin" merge --format jsonl "$work/all.partial"

echo
echo "| partials | bytes | per million events | zstd -3 per million events |"
echo "|---|---:|---:|---:|"
size_row() {
  local label=$1
  shift
  local bytes zbytes
  bytes=$(cat "$@" | wc -c)
  zbytes=$(cat "$@" | zstd -3 -c -q | wc -c)
  printf '| %s | %s | %s MB | %s MB |\n' "$label" "$bytes" \
    "$(mb $(( bytes * 1000000 / events )))" "$(mb $(( zbytes * 1000000 / events )))"
}
size_row "one partial of everything" "$work/all.partial"
size_row "$n partials (--partition K/$n), together" "$work"/part-*.partial
echo
echo "(files in $work)"
