//! End-to-end tests on traces that the real OpenTelemetry Python and JS SDKs and
//! instrumentation wrote (fixtures/otlp/real and fixtures/otlp/node, made by their make.sh;
//! see their READMEs). Each scenario's
//! services counted their own requests per operation; what `analyze` reports must agree
//! with those counts, and the class must be the one the counts imply.

mod common;

use std::collections::BTreeMap;

use common::*;

const DIR: &str = "fixtures/otlp/real";
const HOP_MAP: &str = "fixtures/otlp/real/hop-map.toml";
/// The header the driver sends; Python's instrumentation writes it as
/// `http.request.header.x_operation_id` with an array value.
const OPERATION_HEADER: &str = "http.request.header.x-operation-id";
/// The default attempt budget of every hop.
const BUDGET: u64 = 3;

/// A scenario's `<scenario>.counts.json`: what the services counted themselves.
struct Counts {
    json: serde_json::Value,
}

impl Counts {
    fn load(scenario: &str) -> Counts {
        let path = fixture(&format!("otlp/real/{scenario}.counts.json"));
        let text = std::fs::read_to_string(&path).expect("counts file");
        Counts {
            json: serde_json::from_str(&text).expect("counts file is JSON"),
        }
    }

    fn operations(&self) -> Vec<String> {
        self.json["operations"]
            .as_array()
            .expect("operations")
            .iter()
            .map(|o| o.as_str().expect("operation ID").to_string())
            .collect()
    }

    /// A counter for one operation; a counter the service never bumped is 0.
    fn get(&self, counter: &str, op: &str) -> u64 {
        self.json[counter][op].as_u64().unwrap_or(0)
    }

    /// Every counter of one operation: web's sends, edge's receipts and sends, stock's
    /// receipts.
    fn every_send(&self, op: &str) -> (u64, u64, u64, u64) {
        (
            self.get("web.sent", op),
            self.get("edge.received", op),
            self.get("edge.sent", op),
            self.get("stock.received", op),
        )
    }

    /// The attempts per hop these counts imply where nothing is hidden: web's sends at
    /// the caller, edge's sends at the gateway, stock's receipts at the dependency.
    fn funnel(&self, op: &str) -> (u64, u64, u64) {
        (
            self.get("web.sent", op),
            self.get("edge.sent", op),
            self.get("stock.received", op),
        )
    }
}

fn spans(scenario: &str) -> String {
    format!("{DIR}/{scenario}.otlp.jsonl")
}

/// `analyze` rows of one scenario, operations named by the captured header.
fn rows(scenario: &str, extra: &[&str]) -> BTreeMap<String, OperationRow> {
    let mut flags = vec!["--operation-attribute", OPERATION_HEADER];
    if !extra.iter().any(|f| f.starts_with("--hop")) {
        flags.extend(["--policy", HOP_MAP]);
    }
    flags.extend(extra);
    by_id(analyze_rows(&[spans(scenario)], &flags))
}

/// The attempts per hop `analyze` reported, in the order of [`Counts::funnel`].
fn funnel(row: &OperationRow) -> (u64, u64, u64) {
    (
        row.attempts_at("caller"),
        row.attempts_at("gateway"),
        row.attempts_at("dependency"),
    )
}

#[test]
fn every_driven_request_is_one_operation_named_by_the_captured_header() {
    for scenario in [
        "healthy",
        "nested",
        "sdk-resends",
        "jitter",
        "timeout-overlap",
        "fan-out",
        "wave",
        "two-layer",
        "one-layer",
    ] {
        let counts = Counts::load(scenario);
        let ops = rows(scenario, &[]);
        let got: Vec<&String> = ops.keys().collect();
        let mut want = counts.operations();
        want.sort();
        assert_eq!(got, want.iter().collect::<Vec<_>>(), "{scenario}");
    }
}

#[test]
fn healthy_one_request_per_hop() {
    let counts = Counts::load("healthy");
    for (op, row) in rows("healthy", &[]) {
        let want = counts.funnel(&op);
        assert_eq!(funnel(&row), want, "{op}");
        assert_eq!(want, (1, 1, 1), "{op}: the counts say one request per hop");
        assert_eq!(row.class, "healthy", "{op}");
        assert!(row.findings.is_empty(), "{op}: {:?}", row.findings);
    }
}

#[test]
fn nested_tenacity_at_web_and_at_edge_is_nested_retry() {
    let counts = Counts::load("nested");
    for (op, row) in rows("nested", &[]) {
        let (web, edge_in, edge_out, stock) = counts.every_send(&op);
        assert_eq!(funnel(&row), (web, edge_out, stock), "{op}");
        // web sent more than once, and edge sent more requests than it received for one
        // SKU: two layers retried.
        assert!(
            web > 1 && edge_out > edge_in,
            "{op}: {web} {edge_in} {edge_out}"
        );
        assert_eq!(row.class, "nested-retry", "{op}");
        assert_eq!(row.first_multiplying_hop.as_deref(), Some("caller"), "{op}");
        assert!(row.has_finding("retries@caller") && row.has_finding("retries@gateway"));
        assert!(!row.has_finding("hidden-resends@caller"), "{op}");
    }
}

#[test]
fn urllib3_resends_inside_one_requests_span_are_the_callers_not_the_gateways() {
    let counts = Counts::load("sdk-resends");
    for (op, row) in rows("sdk-resends", &[]) {
        let (web, edge_in, edge_out, stock) = counts.every_send(&op);
        // edge received more requests than web's code sent: a layer inside web's client
        // resent them. edge sent one request per request received: it never retried.
        assert!(edge_in > web, "{op}: {edge_in} received, {web} sent");
        assert_eq!(edge_out, edge_in, "{op}");
        // Every send from web's side is an attempt of the caller hop.
        assert_eq!(funnel(&row), (edge_in, edge_out, stock), "{op}");
        assert!(
            row.has_finding("hidden-resends@caller"),
            "{op}: {:?}",
            row.findings
        );
        assert!(row.has_finding("retries@caller"), "{op}");
        assert!(
            !row.findings.iter().any(|f| f.ends_with("@gateway")),
            "{op}: nothing happened at the gateway: {:?}",
            row.findings
        );
        // web's application attempts repeat and urllib3 sent one of them more than once:
        // two retrying layers in one hop, each counted against its own budget.
        assert!(web > 1, "{op}");
        assert_eq!(row.class, "nested-retry", "{op}");
        assert!(!row.has_finding("over-budget@caller"), "{op}");
        assert_eq!(row.first_multiplying_hop.as_deref(), Some("caller"), "{op}");
    }
}

#[test]
fn tenacity_around_urllib3_retry_is_two_layers_in_one_hop_each_within_its_budget() {
    let counts = Counts::load("two-layer");
    for (op, row) in rows("two-layer", &[]) {
        let (web, edge_in, edge_out, stock) = counts.every_send(&op);
        assert_eq!(funnel(&row), (edge_in, edge_out, stock), "{op}");
        // 3 application attempts, 3 sends each: nine sends, neither layer over its budget.
        assert_eq!((web, edge_in), (BUDGET, BUDGET * BUDGET), "{op}");
        assert_eq!(row.class, "nested-retry", "{op}");
        // The outer layer's retries and the inner layer's sends, both at the caller.
        for f in ["retries@caller", "hidden-resends@caller"] {
            assert!(row.has_finding(f), "{op}: no {f} in {:?}", row.findings);
        }
        assert!(
            !row.findings.iter().any(|f| f.starts_with("over-budget")),
            "{op}: {:?}",
            row.findings
        );
    }
}

#[test]
fn urllib3_resends_inside_one_application_attempt_are_one_layer() {
    let counts = Counts::load("one-layer");
    for (op, row) in rows("one-layer", &[]) {
        let (web, edge_in, edge_out, stock) = counts.every_send(&op);
        assert_eq!(funnel(&row), (edge_in, edge_out, stock), "{op}");
        assert!(web == 1 && edge_in > 1 && edge_in <= BUDGET, "{op}");
        assert_eq!(row.class, "healthy", "{op}");
        assert!(row.has_finding("hidden-resends@caller"), "{op}");
    }
}

#[test]
fn p_retry_around_axios_retry_in_node_is_two_layers_read_from_the_timing() {
    let text = std::fs::read_to_string(fixture("otlp/node/p-retry-axios.counts.json"))
        .expect("counts file");
    let counts = Counts {
        json: serde_json::from_str(&text).expect("counts file is JSON"),
    };
    let flags = [
        "--operation-attribute",
        OPERATION_HEADER,
        "--hop-map",
        "web=caller",
        "--hop-map",
        "stock=dependency",
    ];
    let spans = "fixtures/otlp/node/p-retry-axios.otlp.jsonl";
    let ops = by_id(analyze_rows(&[spans], &flags));
    let mut want = counts.operations();
    want.sort();
    assert_eq!(
        ops.keys().collect::<Vec<_>>(),
        want.iter().collect::<Vec<_>>()
    );
    for (op, row) in &ops {
        let (attempts, resends) = (
            counts.get("web.attempts", op),
            counts.get("web.resends", op),
        );
        // Every send is a client span of web's: the stock's receipts, one attempt each.
        assert_eq!(row.attempts_at("caller"), attempts + resends, "{op}");
        assert_eq!(attempts + resends, counts.get("stock.received", op), "{op}");
        assert_eq!(row.class, "nested-retry", "{op}");
        assert!(
            row.has_finding("inferred-layers@caller"),
            "{op}: {:?}",
            row.findings
        );
        assert!(!row.has_finding("over-budget@caller"), "{op}");
    }
}

#[test]
fn botocore_retries_seen_by_the_endpoint_grouped_by_the_invocation_id() {
    let text =
        std::fs::read_to_string(fixture("otlp/real/aws-sdk.counts.json")).expect("counts file");
    let counts: serde_json::Value = serde_json::from_str(&text).expect("counts file is JSON");
    let flags = [
        "--operation-attribute",
        "http.request.header.amz-sdk-invocation-id",
        "--hop-map",
        "orders=-",
        "--hop-map",
        "aws-endpoint=dependency",
    ];
    let ops = by_id(analyze_rows(&[format!("{DIR}/aws-sdk.otlp.jsonl")], &flags));
    let received = counts["endpoint.received"].as_object().expect("counts");
    assert_eq!(
        ops.keys().collect::<Vec<_>>(),
        received.keys().collect::<Vec<_>>()
    );
    for (op, row) in &ops {
        let n = received[op].as_u64().expect("a count");
        assert_eq!(row.attempts_at("dependency"), n, "{op}");
        let retried = n > 1;
        assert_eq!(row.has_finding("retries@dependency"), retried, "{op}");
        if !retried {
            assert_eq!(row.class, "healthy", "{op}");
        }
    }
    // botocore's `amz-sdk-request: attempt=N; max=M` header numbers each attempt.
    let mut args = vec!["convert"];
    args.extend(flags);
    let spans = format!("{DIR}/aws-sdk.otlp.jsonl");
    args.push(&spans);
    let run = run(&args);
    run.expect_code(0);
    let mut numbers: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in run.stdout_text().lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a native record");
        numbers
            .entry(v["operation_id"].as_str().expect("operation").to_string())
            .or_default()
            .push(v["attempt"].as_u64().expect("an attempt number"));
    }
    for (op, mut got) in numbers {
        got.sort_unstable();
        let n = received[&op].as_u64().expect("a count");
        assert_eq!(got, (1..=n).collect::<Vec<_>>(), "{op}");
    }
}

#[test]
fn a_requeuing_pika_consumer_redelivers_as_its_own_log_says() {
    let text = std::fs::read_to_string(fixture("otlp/real/pika-requeue.counts.json"))
        .expect("counts file");
    let counts: serde_json::Value = serde_json::from_str(&text).expect("counts file is JSON");
    let flags = [
        "--operation-attribute",
        "messaging.message.id",
        "--hop-map",
        "checkout=caller",
        "--hop-map",
        "billing-consumer=consumer",
    ];
    // The natural mapping: pika's consumer spans are `receive` spans with the callback's
    // work below them, a push consumer's deliveries, not polls.
    let ops = by_id(analyze_rows(
        &[format!("{DIR}/pika-requeue.otlp.jsonl")],
        &flags,
    ));
    let deliveries = counts["deliveries"].as_object().expect("counts");
    assert_eq!(
        ops.keys().collect::<Vec<_>>(),
        deliveries.keys().collect::<Vec<_>>()
    );
    for (op, row) in &ops {
        let n = deliveries[op].as_u64().expect("a count");
        assert!(
            n > 1,
            "{op}: the consumer requeued every message at least once"
        );
        // One publish (pika writes two nested producer spans for it), n deliveries.
        assert_eq!(row.attempts_at("caller"), 1, "{op}");
        assert_eq!(row.attempts_at("consumer"), n, "{op}");
        assert_eq!(row.class, "redelivery", "{op}");
        assert!(row.has_finding("redelivery@consumer"), "{op}");
    }
}

#[test]
fn the_hidden_layer_mapped_as_a_hop_of_its_own_shows_both_retrying_layers() {
    let counts = Counts::load("sdk-resends");
    let explicit = rows(
        "sdk-resends",
        &[
            "--hops",
            "caller,sdk,gateway,dependency",
            "--hop-map",
            "web=caller",
            "--hop-map",
            "edge:server=sdk",
            "--hop-map",
            "edge:client=gateway",
            "--hop-map",
            "stock=dependency",
        ],
    );
    for (op, row) in explicit {
        let want = counts.every_send(&op);
        let got = (
            row.attempts_at("caller"),
            row.attempts_at("sdk"),
            row.attempts_at("gateway"),
            row.attempts_at("dependency"),
        );
        assert_eq!(got, want, "{op}");
        for f in ["retries@caller", "retries@sdk", "retry-without-delay@sdk"] {
            assert!(row.has_finding(f), "{op}: no {f} in {:?}", row.findings);
        }
        assert!(!row.has_finding("retries@gateway"), "{op}");
        assert!(
            !row.findings.iter().any(|f| f.starts_with("hidden-resends")),
            "{op}: an explicit map leaves nothing hidden: {:?}",
            row.findings
        );
        assert_eq!(row.class, "nested-retry", "{op}");
    }
}

#[test]
fn one_retry_with_jitter_is_healthy() {
    let counts = Counts::load("jitter");
    for (op, row) in rows("jitter", &[]) {
        let want = counts.funnel(&op);
        assert_eq!(funnel(&row), want, "{op}");
        // One layer (web) retried, within its budget; edge sent once per request.
        assert!(want.0 > 1 && want.0 <= BUDGET, "{op}");
        assert_eq!(
            counts.get("edge.sent", &op),
            counts.get("edge.received", &op)
        );
        assert_eq!(row.class, "healthy", "{op}");
        assert!(row.has_finding("retries@caller"), "{op}");
    }
}

#[test]
fn a_read_timeout_recorded_only_as_an_exception_event_overlaps_at_the_gateway() {
    let counts = Counts::load("timeout-overlap");
    for (op, row) in rows("timeout-overlap", &[]) {
        let want = counts.funnel(&op);
        assert_eq!(funnel(&row), want, "{op}");
        assert!(counts.get("web.timed_out", &op) >= 1, "{op}");
        assert_eq!(row.class, "overlap", "{op}");
        assert!(
            row.has_finding("overlap@gateway"),
            "{op}: {:?}",
            row.findings
        );
        assert!(row.overlap_ms > 0.0, "{op}");
    }

    // The timed-out requests spans carry no status code and no error.type: only the
    // exception event (requests.exceptions.ReadTimeout) says it was a timeout.
    let run = run(&[
        "convert",
        "--policy",
        HOP_MAP,
        "--operation-attribute",
        OPERATION_HEADER,
        &spans("timeout-overlap"),
    ]);
    run.expect_code(0);
    let mut timeouts: BTreeMap<String, u64> = BTreeMap::new();
    for line in run.stdout_text().lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a native record");
        assert_ne!(v["outcome"], "error", "{line}");
        if v["hop"] == "caller" && v["outcome"] == "timeout" {
            *timeouts
                .entry(v["operation_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    for op in counts.operations() {
        assert_eq!(
            timeouts.get(&op).copied().unwrap_or(0),
            counts.get("web.timed_out", &op),
            "{op}"
        );
    }
}

#[test]
fn four_skus_from_one_gateway_request_are_fan_out() {
    let counts = Counts::load("fan-out");
    for (op, row) in rows("fan-out", &[]) {
        let want = counts.funnel(&op);
        assert_eq!(funnel(&row), want, "{op}");
        assert!(want.0 == 1 && want.1 > 1, "{op}");
        assert_eq!(row.class, "fan-out", "{op}");
        assert_eq!(
            row.first_multiplying_hop.as_deref(),
            Some("gateway"),
            "{op}"
        );
    }
}

#[test]
fn a_fixed_delay_failure_wave_is_one_synchronized_burst() {
    let counts = Counts::load("wave");
    let ops = rows("wave", &[]);
    assert_eq!(ops.len(), counts.operations().len());
    for (op, row) in &ops {
        let want = counts.funnel(op);
        assert_eq!(funnel(row), want, "{op}");
        assert_eq!(
            want,
            (2, 2, 2),
            "{op}: one failure and one retry per operation"
        );
        assert!(row.has_finding("retries@caller"), "{op}");
        // Every operation failed in the one stall and came back exactly 500 ms later: the
        // retries of all of them are one wave, however it splits into sub-clusters.
        assert_eq!(row.class, "synchronized-burst", "{op}");
        assert!(row.has_finding("burst@caller"), "{op}");
    }
}

#[test]
fn convert_keeps_the_hidden_sends_so_analyze_gives_the_same_rows() {
    for scenario in ["sdk-resends", "two-layer", "timeout-overlap", "nested"] {
        let converted = TempFile::reserve("real.jsonl");
        let out = converted
            .path()
            .to_str()
            .expect("UTF-8 temp path")
            .to_string();
        run(&[
            "convert",
            "--policy",
            HOP_MAP,
            "--operation-attribute",
            OPERATION_HEADER,
            "-o",
            &out,
            &spans(scenario),
        ])
        .expect_code(0);
        if scenario == "sdk-resends" {
            let text = std::fs::read_to_string(converted.path()).expect("converted file");
            let hidden = text
                .lines()
                .filter(|l| l.contains(r#""hidden":true"#))
                .count();
            let counts = Counts::load(scenario);
            let received: u64 = counts
                .operations()
                .iter()
                .map(|op| counts.get("edge.received", op))
                .sum();
            assert_eq!(
                hidden as u64, received,
                "every send edge received is hidden"
            );
        }
        let direct = rows(scenario, &[]);
        let again = by_id(analyze_rows(&[out.as_str()], &[]));
        assert_eq!(direct, again, "{scenario}");
    }
}
