#!/usr/bin/env bash
# Burst-rule stress (#12): the shapes that made the synchronized-burst rule slow, 100,000
# retries each, timed end to end with `analyze`. Prints a Markdown table of wall time and
# peak RSS per shape. Rerunnable from a fresh clone:
#
#   bench/bursts.sh            # builds the release binary, writes inputs to bench/data/bursts
#
# Shapes (all caller attempt records):
#   one-line       one operation whose one line has 100,001 attempts, 1 ms apart
#   dense-burst    100,000 operations retrying once, all within 40 ms (one huge burst)
#   aligned-waves  100,000 operations in 1,000 groups of 100 retrying at one instant, 1 s apart
#   jittered       100,000 operations retrying once, full jitter over 100 s (no burst)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
DATA=bench/data/bursts
mkdir -p "$DATA"
cargo build --release --quiet

python3 - "$DATA" <<'PY'
import json, os, random, sys
out = sys.argv[1]
def rec(op, attempt, start, finish, outcome):
    return json.dumps({"operation_id": op, "attempt": attempt, "start_ms": start,
                       "finish_ms": finish, "outcome": outcome}, separators=(",", ":"))
def write(name, lines):
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
write("one-line", [rec("op-1", a + 1, a, a + 0.5, 503 if a < 100_000 else "ok")
                   for a in range(100_001)])
rng = random.Random(1)
lines = []
for i in range(100_000):
    lines.append(rec(f"d-{i}", 1, 0, 100, 503))
    t = 600 + i * 0.0004
    lines.append(rec(f"d-{i}", 2, t, t + 50, "ok"))
write("dense-burst", lines)
lines = []
for i in range(100_000):
    failed = 1000 * (i // 100 + 1)
    lines.append(rec(f"a-{i}", 1, failed - 50, failed, 503))
    lines.append(rec(f"a-{i}", 2, failed + 500, failed + 550, "ok"))
write("aligned-waves", lines)
lines = []
for i in range(100_000):
    lines.append(rec(f"j-{i}", 1, 0, 100, 503))
    t = 100 + rng.random() * 100_000
    lines.append(rec(f"j-{i}", 2, t, t + 50, "ok"))
write("jittered", lines)
PY

echo "| shape | retries | bursts | wall s | peak RSS MB |"
echo "|---|---:|---:|---:|---:|"
for shape in one-line dense-burst aligned-waves jittered; do
  file=$DATA/$shape.jsonl
  /usr/bin/time -f "%e %M" -o "$DATA/time" "$BIN" analyze --format json "$file" >"$DATA/out.json"
  read -r wall rss <"$DATA/time"
  bursts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bursts"]["count"])' "$DATA/out.json")
  retries=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(sum(h["retries"] for h in s["hops"]))' "$DATA/out.json")
  echo "| $shape | $retries | $bursts | $wall | $((rss / 1024)) |"
done
