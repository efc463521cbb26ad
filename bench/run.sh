#!/usr/bin/env bash
# Side-by-side benchmark (#6): attempt-funnel's full classification against the per-operation
# funnel counts that users otherwise compute with jq, DuckDB or Polars, on logs made by
# `attempt-funnel generate`. Rerunnable from a fresh clone; see bench/README.md.
#
#   bench/run.sh                                    # 100k and 1M operations, 3 rounds
#   SIZES="100000 1000000 10000000" bench/run.sh    # add 10M operations (~9.5 GB of logs)
#   SIZES=100000 ROUNDS=1 bench/run.sh              # a quick end-to-end check
#   SIZES="100000 1000000 10000000 30000000" ROUNDS=1 bench/run.sh   # the growth table
#
# Environment:
#   SIZES          operation counts to run (default "100000 1000000")
#   ROUNDS         rounds per size, tool order rotated each round; medians reported (3)
#   SEED           seed of the generated logs (1)
#   SKIP_JQ_ABOVE  above this many operations jq runs in the first round only (100000):
#                  the jq one-liner takes over a minute and ~7 GB at 1M operations
#   JQ_MAX_OPS     above this many operations jq is not run at all (1000000): at 10M it
#                  would need ~70 GB of memory
#   ZSTD_ABOVE     above this many operations the logs are generated through zstd
#                  (`generate | zstd`) and read compressed (10000000): 30M operations are
#                  28 GB as text, 2 GB compressed. jq and Polars (whose scan_ndjson reads
#                  no zstd) are not run on them
#   CHECK_MAX_OPS  above this many operations the per-operation agreement check is skipped
#                  (10000000): it holds every tool's rows in Python dictionaries
#   REUSE_DATA     1: keep generated logs even when the binary is newer than them
#   CARGO_TARGET_DIR  where cargo builds (default: target/ in the clone)
#
# Per size it prints, and writes to bench/results/latest.md, a table of median wall time,
# median peak RSS and each tool's ratio to attempt-funnel, with two floors: `cat` (reading the
# file) and bench/floor (parsing every line's fields with sonic-rs on every core, nothing
# else). It fails (exit 1) unless every tool's per-operation counts agree with
# attempt-funnel's, and the parse floor parsed every line.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"100000 1000000"}
ROUNDS=${ROUNDS:-3}
SEED=${SEED:-1}
SKIP_JQ_ABOVE=${SKIP_JQ_ABOVE:-100000}
JQ_MAX_OPS=${JQ_MAX_OPS:-1000000}
ZSTD_ABOVE=${ZSTD_ABOVE:-10000000}
CHECK_MAX_OPS=${CHECK_MAX_OPS:-10000000}
REUSE_DATA=${REUSE_DATA:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

DATA=bench/data
OUT=$DATA/out
RESULTS=bench/results
VENV=bench/.venv
RAW=$RESULTS/raw.tsv
EVENTS_TSV=$RESULTS/events.tsv
REPORT=$RESULTS/latest.md
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
FLOOR=$CARGO_TARGET_DIR/release/parse-floor

# The usual jq funnel one-liner: slurp, group by operation, count attempts per hop.
JQ_FUNNEL='group_by(.operation_id)[]
  | [.[0].operation_id,
     (map(select(.hop == "caller")) | length),
     (map(select(.hop == "gateway")) | length),
     (map(select(.hop == "dependency")) | length),
     (map(.start_ms) | min),
     (map(.finish_ms) | max)]
  | @csv'

say() { printf '%s\n' "$*" >&2; }
die() { say "bench: $*"; exit 1; }

# --- peers and tools, installed when missing ------------------------------------------
apt_updated=
debian_install() {
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  command -v apt-get >/dev/null || die "cannot install $* (no apt-get): install it and rerun"
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  say "bench: installing $* from Debian's packages"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

[ -x /usr/bin/time ] || debian_install time
command -v jq >/dev/null || debian_install jq

if [ ! -x "$VENV/bin/python" ]; then
  say "bench: creating the Python virtual environment $VENV"
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    debian_install python3-venv
    python3 -m venv "$VENV"
  fi
fi
PY=$VENV/bin/python
if ! "$PY" -c 'import duckdb, polars' 2>/dev/null; then
  say "bench: installing duckdb and polars from PyPI into $VENV (takes a while)"
  "$PY" -m pip install --quiet -r bench/requirements.txt
fi

# --- the binary under test --------------------------------------------------------------
say "bench: building attempt-funnel (release)"
cargo build --release --locked --quiet
[ -x "$BIN" ] || die "no binary at $BIN"
say "bench: building the parse floor (bench/floor, release)"
cargo build --release --locked --quiet --manifest-path bench/floor/Cargo.toml
[ -x "$FLOOR" ] || die "no binary at $FLOOR"

mkdir -p "$DATA" "$OUT" "$RESULTS"
: > "$RAW"
: > "$EVENTS_TSV"

# Runs one tool once under /usr/bin/time; appends "size tool round wall_s peak_KiB" to RAW.
# Usage: measure TOOL SIZE ROUND STDOUT_FILE COMMAND...
measure() {
  local tool=$1 size=$2 round=$3 stdout=$4
  shift 4
  local timing=$OUT/$tool.time err=$OUT/$tool.stderr
  if ! /usr/bin/time -f '%e %M' -o "$timing" "$@" >"$stdout" 2>"$err"; then
    cat "$err" >&2
    die "$tool failed on $size operations (round $round): $*"
  fi
  local wall kib
  read -r wall kib < <(tail -n 1 "$timing")
  printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$tool" "$round" "$wall" "$kib" >>"$RAW"
  awk -v r="$round" -v t="$tool" -v w="$wall" -v k="$kib" \
    'BEGIN { printf "  round %s  %-15s %8.2f s %8.0f MB\n", r, t, w, k / 1024 }' >&2
}

run_tool() { # TOOL SIZE ROUND EVENTS
  local tool=$1 size=$2 round=$3 events=$4
  case $tool in
    cat) measure cat "$size" "$round" /dev/null cat "$events" ;;
    parse) measure parse "$size" "$round" "$OUT/parse-$size.txt" "$FLOOR" sonic "$events" ;;
    jq) measure jq "$size" "$round" "$OUT/jq-$size.csv" jq -r -s "$JQ_FUNNEL" "$events" ;;
    duckdb | polars)
      measure "$tool" "$size" "$round" /dev/null \
        "$PY" bench/peers.py "$tool" "$events" "$OUT/$tool-$size.csv" ;;
    attempt-funnel)
      measure attempt-funnel "$size" "$round" /dev/null \
        "$BIN" analyze --format csv -o "$OUT/attempt-funnel-$size.csv" "$events" ;;
  esac
}

machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r)"
versions="$("$BIN" --version), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(jq --version); duckdb $("$PY" -c 'import duckdb; print(duckdb.__version__)'); polars $("$PY" -c 'import polars; print(polars.__version__)'); $("$PY" --version)"

{
  echo "# attempt-funnel benchmark: latest run"
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Machine: $machine; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Versions: $versions"
  echo "- Command: \`SIZES=\"$SIZES\" ROUNDS=$ROUNDS SEED=$SEED SKIP_JQ_ABOVE=$SKIP_JQ_ABOVE JQ_MAX_OPS=$JQ_MAX_OPS bench/run.sh\`"
  echo "- Data: \`attempt-funnel generate --ops N --seed $SEED\` (default mix), JSON Lines."
  echo "- Each size: $ROUNDS round(s), the tool order rotated each round; the table shows the"
  echo "  median wall time and the median peak RSS (\`/usr/bin/time -f '%e %M'\`). Ratios are"
  echo "  the tool's value divided by attempt-funnel's (above 1: attempt-funnel is faster or"
  echo "  leaner). jq runs in the first round only above $SKIP_JQ_ABOVE operations and not at"
  echo "  all above $JQ_MAX_OPS."
  echo
  echo "What each tool runs (\`EVENTS\` is the generated file):"
  echo
  echo "- jq: \`jq -r -s '$(printf '%s' "$JQ_FUNNEL" | tr -s ' \n' ' ')' EVENTS\`"
  echo "- DuckDB, Polars: \`bench/peers.py duckdb|polars EVENTS OUT.csv\` (read_ndjson_auto + GROUP BY;"
  echo "  scan_ndjson + group_by)"
  echo "- parse floor: \`bench/floor\` (\`parse-floor sonic EVENTS\`): every line's attempt fields"
  echo "  parsed by sonic-rs on every core, nothing else done with them"
  echo "- attempt-funnel: \`attempt-funnel analyze --format csv -o OUT.csv EVENTS\`"
} >"$REPORT"

say "bench: $machine"
say "bench: $versions"

for size in $SIZES; do
  events=$DATA/events-$size.jsonl
  compressed=
  if [ "$size" -gt "$ZSTD_ABOVE" ]; then
    events=$events.zst
    compressed=1
  fi
  expected=$DATA/expected-$size.csv
  stale=
  [ "$REUSE_DATA" = 1 ] || [ ! "$BIN" -nt "$events" ] || stale=1
  if [ ! -s "$events" ] || [ ! -s "$expected" ] || [ -n "$stale" ]; then
    say "bench: generating $size operations into $events"
    start=$(date +%s.%N)
    if [ -n "$compressed" ]; then
      command -v zstd >/dev/null || debian_install zstd
      "$BIN" generate --ops "$size" --seed "$SEED" --expected "$expected" |
        zstd -q -3 -T1 -o "$events.part" && mv "$events.part" "$events"
    else
      "$BIN" generate --ops "$size" --seed "$SEED" -o "$events" --expected "$expected"
    fi
    say "$(awk -v s="$start" -v e="$(date +%s.%N)" -v n="$size" \
      'BEGIN { printf "bench: generated in %.2f s (%.0f operations/s)", e - s, n / (e - s) }')"
  fi
  if [ -n "$compressed" ]; then
    lines=$(zstd -dc "$events" | wc -l)
  else
    lines=$(wc -l <"$events")
  fi
  printf '%s\t%s\n' "$size" "$lines" >>"$EVENTS_TSV"
  mb=$(( $(stat -c %s "$events") / 1000000 ))
  say ""
  say "== $size operations: $lines lines, $mb MB${compressed:+ (zstd)}"

  tools=(cat parse jq duckdb polars attempt-funnel)
  if [ -n "$compressed" ]; then
    # cat stays the floor of reading the stored bytes; the readers of text (and the parse
    # floor, which reads plain files) are left out.
    tools=(cat duckdb attempt-funnel)
  fi
  jq_note=""
  if [ -n "$compressed" ]; then
    jq_note="jq, Polars and the parse floor not run: the logs are zstd-compressed (above ZSTD_ABOVE=$ZSTD_ABOVE operations)"
  elif [ "$size" -gt "$JQ_MAX_OPS" ]; then
    jq_note="jq skipped: more than JQ_MAX_OPS=$JQ_MAX_OPS operations"
  elif [ "$size" -gt "$SKIP_JQ_ABOVE" ] && [ "$ROUNDS" -gt 1 ]; then
    jq_note="jq ran in round 1 only: more than SKIP_JQ_ABOVE=$SKIP_JQ_ABOVE operations"
  fi
  [ -z "$jq_note" ] || say "bench: $jq_note"

  for ((round = 1; round <= ROUNDS; round++)); do
    # Rotate the order each round, so that no tool always runs first or right after another.
    shift_by=$(((round - 1) % ${#tools[@]}))
    order=("${tools[@]:shift_by}" "${tools[@]:0:shift_by}")
    say " round $round: ${order[*]}"
    for tool in "${order[@]}"; do
      if [ "$tool" = jq ]; then
        [ "$size" -le "$JQ_MAX_OPS" ] || continue
        [ "$size" -le "$SKIP_JQ_ABOVE" ] || [ "$round" -eq 1 ] || continue
      fi
      run_tool "$tool" "$size" "$round" "$events"
    done
  done

  compare=("duckdb=$OUT/duckdb-$size.csv" "polars=$OUT/polars-$size.csv")
  [ "$size" -gt "$JQ_MAX_OPS" ] || compare=("jq=$OUT/jq-$size.csv" "${compare[@]}")
  [ -z "$compressed" ] || compare=("duckdb=$OUT/duckdb-$size.csv")
  if [ -z "$compressed" ]; then
    parsed=$(cat "$OUT/parse-$size.txt")
    [ "$parsed" = "$lines" ] || die "the parse floor parsed $parsed lines of $lines on $size operations"
  fi
  if [ "$size" -gt "$CHECK_MAX_OPS" ]; then
    check="check: skipped above CHECK_MAX_OPS=$CHECK_MAX_OPS operations"
  else
    check=$("$PY" bench/tally.py check "$expected" "$OUT/attempt-funnel-$size.csv" "${compare[@]}") ||
      die "the tools disagree on $size operations (see above)"
  fi
  table=$("$PY" bench/tally.py table "$RAW" "$size")
  say "$check"
  echo
  echo "### $size operations ($lines lines, $mb MB)"
  echo
  echo "$table"
  if [ -n "$jq_note" ]; then echo; echo "$jq_note."; fi
  {
    echo
    echo "## $size operations ($lines lines, $mb MB)"
    echo
    echo "$table"
    echo
    if [ -n "$jq_note" ]; then echo "$jq_note. "; fi
    echo "${check#check: }."
  } >>"$REPORT"
done

growth=$("$PY" bench/tally.py growth "$RAW" "$EVENTS_TSV")
say ""
echo "### Growth with input size"
echo
echo "$growth"
{
  echo
  echo "## Growth with input size"
  echo
  echo "$growth"
} >>"$REPORT"

say ""
say "bench: results written to $REPORT (raw timings: $RAW)"
