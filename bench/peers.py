"""The per-operation funnel of the usual jq one-liner, as a DuckDB or a Polars user writes it.

    python bench/peers.py duckdb EVENTS.jsonl OUT.csv
    python bench/peers.py polars EVENTS.jsonl OUT.csv

Both write one CSV row per operation: operation_id, caller_attempts, gateway_attempts,
dependency_attempts, first_start_ms, last_finish_ms. Each imports only its own library, so
the timing of one does not include loading the other.
"""
import sys

COLUMNS = ("operation_id", "caller_attempts", "gateway_attempts", "dependency_attempts",
           "first_start_ms", "last_finish_ms")


def duckdb_funnel(src, dst):
    import duckdb

    duckdb.connect().execute(f"""
        COPY (
            SELECT operation_id,
                   count(*) FILTER (WHERE hop = 'caller')     AS caller_attempts,
                   count(*) FILTER (WHERE hop = 'gateway')    AS gateway_attempts,
                   count(*) FILTER (WHERE hop = 'dependency') AS dependency_attempts,
                   min(start_ms)                              AS first_start_ms,
                   max(finish_ms)                             AS last_finish_ms
            FROM read_ndjson_auto('{src}')
            GROUP BY operation_id
        ) TO '{dst}' (HEADER, DELIMITER ',')
    """)


def polars_funnel(src, dst):
    import polars as pl

    hop = pl.col("hop")
    (
        pl.scan_ndjson(src)
        .group_by("operation_id")
        .agg(
            (hop == "caller").sum().alias("caller_attempts"),
            (hop == "gateway").sum().alias("gateway_attempts"),
            (hop == "dependency").sum().alias("dependency_attempts"),
            pl.col("start_ms").min().alias("first_start_ms"),
            pl.col("finish_ms").max().alias("last_finish_ms"),
        )
        .collect()
        .write_csv(dst)
    )


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("duckdb", "polars"):
        sys.exit(__doc__)
    tool, src, dst = sys.argv[1:]
    (duckdb_funnel if tool == "duckdb" else polars_funnel)(src, dst)


if __name__ == "__main__":
    main()
