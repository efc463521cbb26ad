"""Writes one big trace document for the memory benchmark of #16 (bench/documents.sh).

    python3 bench/trace_document.py jaeger TRACES > big.json   # Jaeger "Download JSON", pretty
    python3 bench/trace_document.py otlp TRACES > big.jsonl    # the same spans, OTLP one line per trace

Each trace is a caller (checkout) that calls api-gateway twice (a 503, then a resend), and
a gateway that calls inventory once per caller attempt: 6 client/server spans per trace
plus the gateway's two server spans, 8 spans in all. Deterministic: the same TRACES give
the same bytes. Written as a stream, so the generator itself stays small.
"""
import json
import sys

BASE_US = 1_700_000_000_000_000


def spans(t):
    """The spans of trace t as (service, span_id, parent_id, kind, start_us, dur_us, tags)."""
    start = BASE_US + t * 10_000
    out = []
    for attempt in (0, 1):
        c = f"{t:08x}c{attempt:07x}"
        g = f"{t:08x}a{attempt:07x}"
        gc = f"{t:08x}b{attempt:07x}"
        d = f"{t:08x}d{attempt:07x}"
        at = start + attempt * 400_000
        status = 503 if attempt == 0 else 200
        tags = [("http.request.method", "GET"), ("server.address", "api-gateway"),
                ("url.path", f"/stock/{t % 97}"), ("http.response.status_code", status)]
        if attempt:
            tags.append(("http.request.resend_count", attempt))
        out.append(("checkout", c, None, "client", at, 300_000, tags))
        out.append(("api-gateway", g, c, "server", at + 5_000, 290_000,
                    [("http.route", "/stock/{sku}"), ("http.response.status_code", status)]))
        out.append(("api-gateway", gc, g, "client", at + 10_000, 280_000,
                    [("http.request.method", "GET"), ("server.address", "inventory"),
                     ("url.path", f"/stock/{t % 97}"), ("http.response.status_code", status)]))
        out.append(("inventory", d, gc, "server", at + 15_000, 270_000,
                    [("http.route", "/stock/{sku}"), ("http.response.status_code", status)]))
    return out


def jaeger_tag(k, v):
    if isinstance(v, int):
        return {"key": k, "type": "int64", "value": v}
    return {"key": k, "type": "string", "value": v}


def write_jaeger(traces, w):
    pids = {"checkout": "p1", "api-gateway": "p2", "inventory": "p3"}
    w('{\n  "data": [\n')
    for t in range(traces):
        trace_id = f"{t + 1:016x}{(t + 1) * 7919:016x}"
        doc_spans = []
        for service, sid, parent, kind, start, dur, tags in spans(t):
            doc_spans.append({
                "traceID": trace_id, "spanID": sid, "operationName": "GET",
                "references": [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}] if parent else [],
                "startTime": start, "duration": dur,
                "tags": [jaeger_tag(k, v) for k, v in tags] + [jaeger_tag("span.kind", kind)],
                "logs": [], "processID": pids[service], "warnings": None})
        trace = {"traceID": trace_id, "spans": doc_spans,
                 "processes": {p: {"serviceName": s, "tags": []} for s, p in pids.items()},
                 "warnings": None}
        text = json.dumps(trace, indent=2)
        w("    " + text.replace("\n", "\n    "))
        w(",\n" if t + 1 < traces else "\n")
    w('  ],\n  "total": 0,\n  "limit": 0,\n  "offset": 0,\n  "errors": null\n}\n')


def otlp_value(v):
    return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}


def write_otlp(traces, w):
    kinds = {"server": 2, "client": 3}
    for t in range(traces):
        trace_id = f"{t + 1:016x}{(t + 1) * 7919:016x}"
        by_service = {}
        for service, sid, parent, kind, start, dur, tags in spans(t):
            by_service.setdefault(service, []).append({
                "traceId": trace_id, "spanId": sid, "parentSpanId": parent or "", "name": "GET",
                "kind": kinds[kind], "startTimeUnixNano": str(start * 1000),
                "endTimeUnixNano": str((start + dur) * 1000),
                "attributes": [{"key": k, "value": otlp_value(v)} for k, v in tags]})
        line = {"resourceSpans": [
            {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": s}}]},
             "scopeSpans": [{"scope": {}, "spans": sp}]} for s, sp in by_service.items()]}
        w(json.dumps(line, separators=(",", ":")) + "\n")


def main():
    form, traces = sys.argv[1], int(sys.argv[2])
    out = sys.stdout
    {"jaeger": write_jaeger, "otlp": write_otlp}[form](traces, out.write)


if __name__ == "__main__":
    main()
