#!/usr/bin/env bash
# Scaling of one operation (#13): 1k, 10k and 100k attempts in a single operation, in the
# shapes that were once quadratic or worse, to show that time grows near-linearly.
#
#   bench/hostile.sh                 # 1000 10000 100000
#   SIZES="1000 10000" bench/hostile.sh
#
# Shapes (generated here, into bench/data/hostile/):
#   retries   one line of N retries at the caller, each overlapping the next
#   hot-loop  one caller attempt with N dependency attempts under it (explicit parent_id)
#   otlp      one OTLP trace of N sibling client spans under one root span
#   show      `show` of the hot-loop operation (tree, lanes, overlaps, timeline)
# Retries are 10 ms apart, so that the cross-operation burst rule (whose narrowing is
# #12's) sees no dense cluster; this measures the per-operation stages.
#
# Prints a Markdown table of wall seconds and peak RSS (GNU time), one run each.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"1000 10000 100000"}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
DATA=bench/data/hostile
mkdir -p "$DATA"
[ -x /usr/bin/time ] || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 1; }
cargo build --release --quiet

gen() { # shape n → file
  python3 - "$1" "$2" <<'PY'
import json, sys
shape, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout
if shape == "retries":
    for i in range(n):
        out.write(json.dumps({"operation_id": "hot", "hop": "caller", "attempt": i + 1,
                              "start_ms": i * 10, "finish_ms": i * 10 + 15, "outcome": 503}) + "\n")
elif shape == "hot-loop":
    out.write(json.dumps({"operation_id": "loop", "hop": "caller", "start_ms": 0,
                          "finish_ms": n * 10 + 10, "span_id": "root"}) + "\n")
    for i in range(n):
        out.write(json.dumps({"operation_id": "loop", "hop": "dependency", "attempt": i + 1,
                              "start_ms": i * 10, "finish_ms": i * 10 + 5, "outcome": 503,
                              "span_id": f"s{i}", "parent_id": "root"}) + "\n")
elif shape == "otlp":
    trace = "0af7651916cd43dd8448eb211c80319c"
    spans = [{"traceId": trace, "spanId": "1000000000000000", "name": "root", "kind": 2,
              "startTimeUnixNano": "1000000000", "endTimeUnixNano": str(10**9 + (n + 1) * 10**7)}]
    for i in range(n):
        start = 10**9 + i * 10**7
        spans.append({"traceId": trace, "spanId": "%016x" % (0x2000000000000000 + i),
                      "parentSpanId": "1000000000000000", "name": "GET", "kind": 3,
                      "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5 * 10**6),
                      "attributes": [{"key": "server.address", "value": {"stringValue": "db"}}]})
    out.write(json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "caller"}}]},
        "scopeSpans": [{"spans": spans}]}]}) + "\n")
PY
}

measure() { # label n args...
  local label=$1 n=$2; shift 2
  local out=$DATA/time.txt t
  /usr/bin/time -o "$out" -f '%e %M' "$BIN" "$@" >/dev/null 2>&1 || true
  t=$(tail -n 1 "$out")
  local wall=${t% *} kb=${t#* }
  printf '| %s | %s | %s | %s | %s |\n' "$label" "$n" "$wall" "$((kb / 1024))" \
    "$(python3 -c "print(f'{$wall / $n * 1000:.3f}')")"
}

echo "| shape | attempts in the operation | wall s | peak MB | ms per attempt |"
echo "|---|---:|---:|---:|---:|"
for shape in retries hot-loop otlp show; do
  for n in $SIZES; do
    src=$shape; [ "$shape" = show ] && src=hot-loop
    file=$DATA/$src-$n.jsonl
    [ -s "$file" ] || gen "$src" "$n" > "$file"
    case $shape in
      show) measure "$shape" "$n" show loop "$file" ;;
      *) measure "$shape" "$n" analyze --format jsonl "$file" ;;
    esac
  done
done
