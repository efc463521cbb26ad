#!/usr/bin/env bash
# attempt-funnel on Apache Spark, on this machine, checked against one run.
#
#   examples/spark/run.sh            # a generated input of 200 000 operations
#   examples/spark/run.sh FILE...    # your attempt logs (JSON Lines or logfmt)
#
# 1. installs pyspark from PyPI into a virtual environment (Spark needs Java 17 or later:
#    see README.md beside this script for where to get it);
# 2. builds attempt-funnel (cargo build --release) unless ATTEMPT_FUNNEL names a binary;
# 3. runs funnel_job.py with spark-submit on a local master: every line routed by its
#    operation key, `attempt-funnel analyze --format partial` once per partition through
#    RDD.pipe, the partials saved as text files;
# 4. merges the partials with `attempt-funnel merge`, runs `attempt-funnel analyze` once
#    over the same input, prints both summaries, and exits 1 unless the per-operation rows
#    (jsonl, csv), the JSON summaries and the gate's verdict are the same.
#
# Settings (environment): PARTITIONS (8), SPARK_MASTER (local[2]), SPARK_VENV
# (~/.cache/attempt-funnel/spark-venv), PYSPARK_VERSION (4.0.5), WORK (a new temporary
# directory, kept), OPS (200000: the generated input's operations), FAIL_ON (the gate's
# condition both runs are judged by).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
partitions=${PARTITIONS:-8}
master=${SPARK_MASTER:-local[2]}
venv=${SPARK_VENV:-$HOME/.cache/attempt-funnel/spark-venv}
pyspark_version=${PYSPARK_VERSION:-4.0.5}
ops=${OPS:-200000}
fail_on=${FAIL_ON:-nested-retry > 1%}
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/attempt-funnel-spark.XXXXXX")}
mkdir -p "$work"

say() { printf '\n== %s\n' "$*"; }

if ! command -v java >/dev/null; then
  echo "run.sh: Spark needs Java 17 or later and no 'java' is on PATH: install one (e.g. apt-get install openjdk-17-jre-headless; see examples/spark/README.md)" >&2
  exit 2
fi

say "attempt-funnel"
if [ -n "${ATTEMPT_FUNNEL:-}" ]; then
  bin=$(cd "$(dirname "$ATTEMPT_FUNNEL")" && pwd)/$(basename "$ATTEMPT_FUNNEL")
else
  (cd "$repo" && cargo build --release --quiet)
  bin=${CARGO_TARGET_DIR:-$repo/target}/release/attempt-funnel
  bin=$(cd "$(dirname "$bin")" && pwd)/attempt-funnel
fi
"$bin" --version

say "pyspark $pyspark_version in $venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$pyspark_version')" 2>/dev/null; then
  "$venv/bin/pip" install --quiet "pyspark==$pyspark_version"
fi
java -version 2>&1 | head -1
# spark-submit finds its Spark in the environment's pyspark, and its workers' Python.
export PATH="$venv/bin:$PATH" PYSPARK_PYTHON="$venv/bin/python"

if [ $# -eq 0 ]; then
  say "input: attempt-funnel generate --ops $ops --seed 1"
  "$bin" generate --ops "$ops" --seed 1 -o "$work/input.jsonl"
  inputs=("$work/input.jsonl")
else
  inputs=()
  for f in "$@"; do inputs+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
fi
ls -l "${inputs[@]}"

say "Spark ($master, $partitions partitions): route by operation key, analyze --format partial per partition"
rm -rf "$work/partials"
start=$(date +%s)
spark-submit --master "$master" \
  --conf spark.ui.showConsoleProgress=false \
  "$here/funnel_job.py" --binary "$bin" --partitions "$partitions" \
  --partials "$work/partials" "${inputs[@]}" 2> "$work/spark.log" || {
  tail -40 "$work/spark.log" >&2
  exit 2
}
echo "spark-submit: $(( $(date +%s) - start )) s (its log: $work/spark.log)"
ls -l "$work"/partials/part-* | awk '{print $5, $NF}'

say "merge the partials, and one run over the same input"
# Every format from each side; the gate's exit code from each side.
gate_of() { set +e; "$@" --fail-on "$fail_on" > /dev/null 2>&1; echo $?; set -e; }
partials=("$work"/partials/part-*)
for format in jsonl csv json table; do
  "$bin" merge --format "$format" -o "$work/merged.$format" "${partials[@]}"
  "$bin" analyze --format "$format" -o "$work/one-run.$format" "${inputs[@]}"
done
merged_gate=$(gate_of "$bin" merge "${partials[@]}")
one_gate=$(gate_of "$bin" analyze "${inputs[@]}")

say "both summaries, side by side (whole reports: $work/merged.table, $work/one-run.table)"
python3 - "$work/merged.json" "$work/one-run.json" <<'EOF'
import json, sys
merged, one = (json.load(open(p)) for p in sys.argv[1:3])
def figures(s):
    yield "operations", s["operations"]
    yield "attempts", s["attempts"]
    yield "lines / events / bad lines", "%d / %d / %d" % (
        s["input"]["lines"], s["input"]["events"], s["input"]["bad_lines"])
    for c in s["classes"]:
        yield c["class"], c["operations"]
    for h in s["hops"]:
        l = h["latency_ms"]
        yield h["hop"] + ": attempts, amplification", "%d, %.3f" % (h["attempts"], h["amplification"])
        yield h["hop"] + ": p50/p95/p99 ms", "%g / %g / %g" % (l["p50"], l["p95"], l["p99"])
    yield "bursts (operations)", "%d (%d)" % (s["bursts"]["count"], s["bursts"]["operations"])
    yield "overlap: operations, ms", "%d, %.0f" % (s["overlap"]["operations"], s["overlap"]["total_ms"])
    yield "worst operation", s["worst_operations"][0]["operation_id"] if s["worst_operations"] else "-"
    yield "timelines drawn", len(s["timelines"])
rows = list(zip(figures(merged), figures(one)))
width = max(len(name) for (name, _), _ in rows)
print("%-*s  %20s  %20s" % (width, "", "merged (Spark)", "one run"))
for (name, a), (_, b) in rows:
    print("%-*s  %20s  %20s%s" % (width, name, a, b, "" if a == b else "  <- differs"))
EOF

say "check"
status=0
for format in jsonl csv; do
  if cmp -s "$work/merged.$format" "$work/one-run.$format"; then
    echo "--format $format: byte-identical ($(wc -l < "$work/merged.$format") lines)"
  else
    echo "--format $format: DIFFERENT"; status=1
  fi
done
# The summaries name their inputs: the partials read standard input, one run the files.
if python3 - "$work/merged.json" "$work/one-run.json" <<'EOF'
import json, sys
merged, one = (json.load(open(p)) for p in sys.argv[1:3])
for summary in (merged, one):
    summary["input"].pop("files")
sys.exit(merged != one)
EOF
then
  echo "--format json: identical summaries (input file names aside)"
else
  echo "--format json: DIFFERENT"; status=1
fi
if [ "$merged_gate" = "$one_gate" ]; then
  echo "gate --fail-on '$fail_on': exit $merged_gate from both"
else
  echo "gate --fail-on '$fail_on': exit $merged_gate merged, $one_gate one run: DIFFERENT"; status=1
fi
if [ $status -eq 0 ]; then
  echo "OK: the merge of $partitions Spark partitions equals one run (files in $work)"
else
  echo "FAILED: see $work" >&2
fi
exit $status
