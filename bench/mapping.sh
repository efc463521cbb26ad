#!/usr/bin/env bash
# Key mapping (#15): does the plain path (no mapping) cost what it did, and what does a
# mapped line cost? Counted in instructions (valgrind --tool=callgrind), which a shared,
# noisy machine does not blur as it blurs wall time.
#
#   BASE=/path/to/attempt-funnel-before bench/mapping.sh      # plain path: BASE vs this build
#   OPS=20000 bench/mapping.sh                                # mapped vs plain only
#
# Data: `generate --ops OPS --seed 1` (default 100000), and the same events with every key
# renamed (nested `ctx.request.id`, `kubernetes.labels.app`, a 0-based `retries`, a
# duration instead of the finish), read back with --field. Both must give the same CSV.
# Prints the instructions collected per run.
set -euo pipefail
cd "$(dirname "$0")/.."

OPS=${OPS:-100000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
DATA=bench/data/mapping
mkdir -p "$DATA"
command -v valgrind >/dev/null || { echo "bench: needs valgrind" >&2; exit 1; }
cargo build --release --quiet

PLAIN=$DATA/events-$OPS.jsonl
RENAMED=$DATA/renamed-$OPS.jsonl
[ -s "$PLAIN" ] || "$BIN" generate --ops "$OPS" --seed 1 -o "$PLAIN" 2>/dev/null
[ -s "$RENAMED" ] || python3 - "$PLAIN" "$RENAMED" <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line in src:
        o = json.loads(line)
        r = {"ctx": {"request": {"id": o["operation_id"]}}, "run": o["test_run_id"],
             "kubernetes": {"labels": {"app": o["hop"]}}, "retries": o["attempt"] - 1,
             "ts": o["start_ms"]}
        if "finish_ms" in o:
            r["elapsed_ms"] = o["finish_ms"] - o["start_ms"]
        for k in ("outcome", "target", "message_id"):
            if k in o:
                r["x_" + k] = o[k]
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
FIELDS=(--field operation_id=ctx.request.id --field hop=kubernetes.labels.app
  --field retry_count=retries --field start_ms=ts --field duration_ms=elapsed_ms
  --field outcome=x_outcome --field target=x_target --field message_id=x_message_id)

cmp <("$BIN" analyze --format csv "$PLAIN") <("$BIN" analyze --format csv "${FIELDS[@]}" "$RENAMED") \
  || { echo "bench: the mapped input does not give the plain input's rows" >&2; exit 1; }

count() { # label, command… → "label: N instructions"
  local label=$1; shift
  local n
  n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*Collected : //p')
  echo "$label: $n instructions"
}
if [ -n "${BASE:-}" ]; then
  count "plain, BASE" "$BASE" analyze --format csv -o /dev/null "$PLAIN"
fi
count "plain, this build" "$BIN" analyze --format csv -o /dev/null "$PLAIN"
count "mapped, this build" "$BIN" analyze --format csv -o /dev/null "${FIELDS[@]}" "$RENAMED"
