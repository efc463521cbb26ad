"""attempt-funnel on Apache Spark: route every attempt-log line by its operation key, run
`attempt-funnel analyze --format partial` once per partition through RDD.pipe, and save
the partials; `attempt-funnel merge` then finishes the analysis (see run.sh, which does it
on this machine, and docs/scale.md for a real cluster).

    spark-submit funnel_job.py --binary /path/to/attempt-funnel --partitions 8 \\
        --partials OUT_DIR INPUT [INPUT ...] [-- ANALYZE_FLAGS ...]

INPUT is anything Spark's textFile reads (files, directories, globs, s3a://, gs://,
hdfs://; gzip is decompressed by Spark). ANALYZE_FLAGS go to every `analyze` (for example
`--policy attempt-funnel.toml`, which must then exist on every executor); `merge` must be
given the same rule settings, or it refuses the partials and names the one that differs.
"""

import argparse
import json
import re
import shlex
import sys

from pyspark import SparkContext

# The spellings attempt-funnel reads for the two parts of an operation's key (docs/input.md).
OPERATION_KEYS = ("operation_id", "operationId", "operation")
RUN_KEYS = ("test_run_id", "testRunId", "run")


def _text(value):
    """An ID as attempt-funnel reads it: text as is, an integer as its decimal text."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        return str(value)
    return None


def _logfmt_value(line, keys):
    """The value of the first of `keys` in a logfmt line (quoted or bare)."""
    for key in keys:
        match = re.search(r'(?:^|\s)' + key + r'=("(?:[^"\\]|\\.)*"|\S*)', line)
        if match:
            value = match.group(1)
            if value.startswith('"'):
                try:
                    return json.loads(value)
                except ValueError:
                    return None
            return value
    return None


def operation_key(line):
    """(test run, operation ID) of a JSON Lines or logfmt attempt event, or None when the
    line has none that can be read: such a line is a bad line, and attempt-funnel reports it
    wherever it goes."""
    text = line.strip()
    if text.startswith("{"):
        try:
            event = json.loads(text)
        except ValueError:
            return None
        if not isinstance(event, dict):
            return None
        pick = lambda keys: next((event[k] for k in keys if k in event), None)
        run, operation = _text(pick(RUN_KEYS)), _text(pick(OPERATION_KEYS))
    else:
        run, operation = _logfmt_value(text, RUN_KEYS), _logfmt_value(text, OPERATION_KEYS)
    if not operation:
        return None
    return (run or None, operation)


def partition_of(key, n):
    """attempt-funnel's own partition of an operation (docs/scale.md): FNV-1a over the test
    run's bytes, a 0xFF byte and the operation ID's bytes, modulo n. Any function that sends
    all lines of one operation to one partition gives the same merged answer; this one
    also agrees with `attempt-funnel analyze --partition K/N`. Lines without a key go to
    partition 0."""
    if key is None:
        return 0
    run, operation = key
    h = 0xCBF29CE484222325
    for b in (run or "").encode() + b"\xff" + operation.encode():
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h % n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="attempt-funnel on every executor")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--partials", required=True, help="directory the partials go to")
    parser.add_argument("inputs", nargs="+")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, analyze_flags = parser.parse_args(argv[:split]), argv[split + 1 :]
    n = args.partitions

    sc = SparkContext(appName="attempt-funnel")
    sc.setLogLevel("WARN")
    lines = sc.textFile(",".join(args.inputs)).filter(lambda line: line.strip())
    # The shuffle: every line of one operation lands in one partition.
    routed = lines.map(lambda line: (operation_key(line), line)).partitionBy(
        n, lambda key: partition_of(key, n)
    )
    command = shlex.join([args.binary, "analyze", "--format", "partial", *analyze_flags])
    # One attempt-funnel per partition, its lines on stdin, its partial on stdout. Spark
    # runs one task per core: one thread each. RDD.pipe gives the process this environment
    # only, hence the binary's absolute path. No checkCode: `analyze` exits 2 on bad lines,
    # which are the merge's to report; a run that failed leaves a partial that is empty or
    # cut short, and the merge refuses it, naming the file.
    partials = routed.values().pipe(command, env={"RAYON_NUM_THREADS": "1"})
    partials.saveAsTextFile(args.partials)
    sc.stop()


if __name__ == "__main__":
    main()
