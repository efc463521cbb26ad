"""Checks and tables for bench/run.sh (standard library only).

    python bench/tally.py check EXPECTED.csv AF.csv [TOOL=OUT.csv ...]
        Normalises every tool's per-operation funnel (operation_id, caller_attempts,
        gateway_attempts, dependency_attempts, first_start_ms, last_finish_ms) and fails
        loudly unless all agree with attempt-funnel's. Also checks attempt-funnel's classes
        against `attempt-funnel generate --expected`.

    python bench/tally.py table RAW.tsv SIZE
        Prints the Markdown table of one size from the raw timings (size, tool, round,
        wall seconds, peak RSS KiB): median wall time, median peak memory, and each tool's
        ratio to attempt-funnel.

    python bench/tally.py growth RAW.tsv EVENTS.tsv
        Prints the growth table: per size (EVENTS.tsv: size, lines), attempt-funnel's and
        DuckDB's median wall time and peak memory, attempt-funnel's also per million events.
"""
import csv
import statistics
import sys

FUNNEL = ("caller_attempts", "gateway_attempts", "dependency_attempts",
          "first_start_ms", "last_finish_ms")

TOOLS = {  # tool: (row label, what it computes), in table order
    "cat": ("cat (floor)", "reads the file, nothing else"),
    "parse": ("parse floor (sonic-rs)", "parses every line's fields, nothing else"),
    "jq": ("jq -s one-liner", "per-operation funnel counts"),
    "duckdb": ("DuckDB (Python)", "per-operation funnel counts"),
    "polars": ("Polars (Python)", "per-operation funnel counts"),
    "attempt-funnel": ("attempt-funnel analyze", "full classification (csv)"),
}


def number(text):
    """'1700000000123', '1700000000123.0' and '1.700000000123e12' are one number."""
    value = float(text)
    return int(value) if value.is_integer() else value


def funnel_rows(path, header=True):
    """operation_id -> (caller, gateway, dependency, first_start, last_finish)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        if header:
            names = next(reader)
            index = [names.index("operation_id")] + [names.index(c) for c in FUNNEL]
        else:  # the jq one-liner writes the columns in FUNNEL order, without a header
            index = list(range(1 + len(FUNNEL)))
        rows = {}
        for row in reader:
            op = row[index[0]]
            if op in rows:
                sys.exit(f"bench: {path}: operation {op} twice")
            rows[op] = tuple(number(row[i]) for i in index[1:])
        return rows


def check(expected_path, af_path, others):
    reference = funnel_rows(af_path)
    failed = False
    for spec in others:
        tool, path = spec.split("=", 1)
        rows = funnel_rows(path, header=(tool != "jq"))
        if rows == reference:
            continue
        failed = True
        missing = sorted(set(reference) - set(rows))
        extra = sorted(set(rows) - set(reference))
        differ = sorted(op for op in set(rows) & set(reference) if rows[op] != reference[op])
        print(f"bench: MISMATCH: {tool} disagrees with attempt-funnel on the per-operation "
              f"funnel: {len(missing)} operations missing, {len(extra)} extra, "
              f"{len(differ)} with other counts", file=sys.stderr)
        print(f"  columns: {', '.join(FUNNEL)}", file=sys.stderr)
        for op in differ[:5]:
            print(f"  {op}: {tool} {rows[op]} vs attempt-funnel {reference[op]}", file=sys.stderr)
        for op in (missing + extra)[:5]:
            print(f"  {op}: only in {'attempt-funnel' if op in reference else tool}",
                  file=sys.stderr)

    with open(expected_path, newline="") as f:
        expected = {r["operation_id"]: r["class"] for r in csv.DictReader(f)}
    with open(af_path, newline="") as f:
        classes = {r["operation_id"]: r["class"] for r in csv.DictReader(f)}
    wrong = sorted(op for op in expected if classes.get(op) != expected[op])
    if wrong or len(classes) != len(expected):
        failed = True
        print(f"bench: MISMATCH: attempt-funnel classified {len(wrong)} of {len(expected)} "
              f"operations otherwise than generated", file=sys.stderr)
        for op in wrong[:5]:
            print(f"  {op}: expected {expected[op]}, got {classes.get(op)}", file=sys.stderr)
    if failed:
        sys.exit(1)
    tools = ", ".join(["attempt-funnel"] + [s.split("=", 1)[0] for s in others])
    print(f"check: per-operation funnel counts agree across {tools} "
          f"({len(reference)} operations x {len(FUNNEL)} columns); "
          f"attempt-funnel's classes match generate --expected")


def table(raw_path, size):
    runs = {}
    with open(raw_path) as f:
        for line in f:
            s, tool, _round, wall, kib = line.split()
            if s == size:
                runs.setdefault(tool, []).append((float(wall), int(kib) / 1024))
    if "attempt-funnel" not in runs:
        sys.exit(f"bench: no attempt-funnel timings for size {size}")
    med = {t: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r))
           for t, r in runs.items()}
    base_wall, base_mb = med["attempt-funnel"]
    print("| tool | computes | runs | median wall s | peak MB | time ÷ attempt-funnel "
          "| memory ÷ attempt-funnel |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for tool, (label, computes) in TOOLS.items():
        if tool not in med:
            print(f"| {label} | {computes} | 0 | skipped | | | |")
            continue
        wall, mb = med[tool]
        print(f"| {label} | {computes} | {len(runs[tool])} | {wall:.2f} | {mb:.0f} "
              f"| {wall / base_wall:.2f}× | {mb / base_mb:.2f}× |")


def growth(raw_path, events_path):
    """Per size: attempt-funnel's and DuckDB's median wall time and peak memory, each also
    per million events, so that linear growth shows as flat columns."""
    events = {}
    with open(events_path) as f:
        for line in f:
            size, lines = line.split()
            events[size] = int(lines)
    runs = {}
    with open(raw_path) as f:
        for line in f:
            size, tool, _round, wall, kib = line.split()
            runs.setdefault((size, tool), []).append((float(wall), int(kib) / 1024))
    print("| operations | events | attempt-funnel s | s per M events | peak MB "
          "| MB per M events | DuckDB s | DuckDB peak MB | time ÷ DuckDB | memory ÷ DuckDB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, n in events.items():
        m = n / 1e6
        af = runs.get((size, "attempt-funnel"))
        if not af:
            continue
        wall = statistics.median(w for w, _ in af)
        mb = statistics.median(k for _, k in af)
        duck = runs.get((size, "duckdb"))
        if duck:
            dw = statistics.median(w for w, _ in duck)
            dm = statistics.median(k for _, k in duck)
            peers = f"{dw:.2f} | {dm:.0f} | {wall / dw:.2f}× | {mb / dm:.2f}×"
        else:
            peers = "– | – | – | –"
        print(f"| {int(size):,} | {m:.1f} M | {wall:.2f} | {wall / m:.2f} | {mb:.0f} "
              f"| {mb / m:.0f} | {peers} |")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "growth":
        growth(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
