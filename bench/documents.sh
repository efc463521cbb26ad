#!/usr/bin/env bash
# Memory of reading one big trace document (#16): the same spans as one Jaeger
# "Download JSON" document (pretty-printed) and as OTLP JSON Lines, both through
# `attempt-funnel analyze`; prints file size, user CPU seconds and peak RSS of each.
#
#   bench/documents.sh            # 30 000 traces, 240 000 spans (~260 MB of Jaeger JSON)
#   TRACES=100000 bench/documents.sh
#
# The point is the peak RSS: a document is streamed, so reading it should cost no more
# memory than reading the same spans line by line, and far less than the document's size
# times the few copies a parse-it-whole reader would hold.
set -euo pipefail
cd "$(dirname "$0")/.."

TRACES=${TRACES:-30000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/release/attempt-funnel
DATA=bench/data/documents
mkdir -p "$DATA"
[ -x /usr/bin/time ] || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
cargo build --release --locked >&2

for form in jaeger otlp; do
  file=$DATA/$form-$TRACES.json
  [ -s "$file" ] || python3 bench/trace_document.py "$form" "$TRACES" > "$file"
done

printf '| input | size MB | user s | peak RSS MB |\n|---|---|---|---|\n'
for form in jaeger otlp; do
  file=$DATA/$form-$TRACES.json
  stats=$( { /usr/bin/time -f '%U %M' "$BIN" analyze --hop-map checkout=caller \
      --hop-map inventory=dependency --format json -o /dev/null "$file" 2>&1 >/dev/null; } | tail -1)
  read -r user kb <<<"$stats"
  size=$(( $(wc -c < "$file") / 1000000 ))
  printf '| %s | %s | %s | %s |\n' "$form" "$size" "$user" "$(( kb / 1024 ))"
done
