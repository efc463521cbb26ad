//! End-to-end tests of `--format html` and of the data it draws (the summary's
//! `attempts_over_time` and `timelines`), without a browser: the page is self-contained and
//! names its charts, its numbers agree with the JSON summary, and it stays small on a large
//! input. `tests/html_browser.rs` loads it in a real browser.

mod common;

use common::*;
use serde_json::Value;

fn html_of(args: &[&str]) -> String {
    let mut all = vec!["--format", "html"];
    all.extend(args);
    let run = analyze(&all);
    run.expect_code(0);
    run.stdout_text()
}

#[test]
fn the_page_is_self_contained_and_names_its_charts() {
    let page = html_of(&["fixtures/incident.jsonl"]);
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.trim_end().ends_with("</html>"));
    for forbidden in ["<script", "http://", "https://", "<link", "@import", "url("] {
        assert!(!page.contains(forbidden), "the page holds {forbidden:?}");
    }
    assert!(page.contains("Content-Security-Policy"));
    for id in [
        "id=\"funnel-chart\"",
        "id=\"class-chart\"",
        "id=\"attempts-over-time\"",
        "class=\"chart op-timeline\"",
        "class=\"burst-marker\"",
        "@media print",
    ] {
        assert!(page.contains(id), "no {id} in the page");
    }
    assert_eq!(
        page.matches("class=\"chart op-timeline\"").count(),
        10,
        "--top 10"
    );
}

#[test]
fn the_page_escapes_operation_ids() {
    let events = br#"{"operation_id":"<img src=x onerror=alert(1)>","hop":"caller","attempt":1,"start_ms":0,"finish_ms":10,"outcome":503,"target":"a&b"}
{"operation_id":"<img src=x onerror=alert(1)>","hop":"caller","attempt":2,"start_ms":200,"finish_ms":210,"outcome":"ok","target":"a&b"}
"#;
    let file = TempFile::new("xss.jsonl", events);
    let page = html_of(&[file.path().to_str().unwrap()]);
    assert!(
        !page.contains("<img"),
        "markup from the input reached the page"
    );
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
}

fn summary_value(args: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend(args);
    let run = analyze(&all);
    run.expect_code(0);
    decode_summary_value(&run.stdout)
}

fn sum(v: &Value) -> u64 {
    v.as_array()
        .expect("array")
        .iter()
        .map(|n| n.as_u64().expect("count"))
        .sum()
}

/// Chart buckets are aligned to multiples of the step on the input's clock, not to the
/// first start (#10): so that a chart is an exact sum of finer buckets that merge across
/// partitions. Three operations at +0.123 s, +5.123 s and +40 s of an epoch-ms clock: the
/// range 39,877 ms ÷ 198 asks for a step of 500 ms, and the first bucket starts at the
/// multiple of 500 below the first start.
#[test]
fn attempts_over_time_buckets_are_aligned_to_multiples_of_the_step() {
    let t0 = 1_700_000_000_123u64;
    let lines: String = [t0, t0 + 5_000, 1_700_000_040_000]
        .iter()
        .enumerate()
        .map(|(i, start)| {
            format!(
                "{{\"operation_id\":\"op-{i}\",\"hop\":\"caller\",\"start_ms\":{start},\"finish_ms\":{},\"outcome\":\"ok\"}}\n",
                start + 10
            )
        })
        .collect();
    let file = TempFile::new("aligned.jsonl", lines.as_bytes());
    let s = summary_value(&[file.path.to_str().unwrap()]);
    let t = &s["attempts_over_time"];
    assert_eq!(t["bucket_ms"].as_f64(), Some(500.0));
    assert_eq!(t["start_ms"].as_f64(), Some(1_700_000_000_000.0));
    assert_eq!(t["buckets"].as_u64(), Some(81));
    let started: Vec<(usize, u64)> = t["operations_started"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((i, n.as_u64()?)).filter(|&(_, n)| n > 0))
        .collect();
    assert_eq!(started, vec![(0, 1), (10, 1), (80, 1)]);
}

#[test]
fn attempts_over_time_adds_up_to_the_per_hop_counts() {
    let s = summary_value(&["fixtures/incident.jsonl"]);
    let t = &s["attempts_over_time"];
    let buckets = t["buckets"].as_u64().unwrap();
    assert!((1..=200).contains(&buckets), "{buckets} buckets");
    assert_eq!(
        sum(&t["operations_started"]),
        s["operations"].as_u64().unwrap()
    );
    let bucket_ms = t["bucket_ms"].as_f64().unwrap();
    assert!([1.0, 2.0, 5.0].contains(&(bucket_ms / 10f64.powf(bucket_ms.log10().floor()))));
    for series in t["hops"].as_array().unwrap() {
        let hop = series["hop"].as_str().unwrap();
        let h = s["hops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["hop"] == hop)
            .unwrap();
        for key in ["originals", "retries", "redeliveries"] {
            assert_eq!(series[key].as_array().unwrap().len() as u64, buckets);
            assert_eq!(sum(&series[key]), h[key].as_u64().unwrap(), "{hop} {key}");
        }
    }
    let retries: u64 = s["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["retries"].as_u64().unwrap() + h["redeliveries"].as_u64().unwrap())
        .sum();
    assert_eq!(s["retry_attempts"].as_u64().unwrap(), retries);
    assert_eq!(s["main_multiplying_hop"], "caller");
}

#[test]
fn timelines_follow_the_worst_operations_and_carry_the_spec_trace_overlap() {
    let s = summary_value(&["--top", "3", "fixtures/incident.jsonl"]);
    let worst = s["worst_operations"].as_array().unwrap();
    let timelines = s["timelines"].as_array().unwrap();
    assert_eq!(timelines.len(), 3);
    for (w, t) in worst.iter().zip(timelines) {
        assert_eq!(w["operation_id"], t["operation_id"]);
        assert_eq!(
            t["attempts"].as_array().unwrap().len() as u64,
            w["total_attempts"].as_u64().unwrap()
        );
    }

    let s = summary_value(&["fixtures/logfmt-trace.logfmt"]);
    let t = &s["timelines"][0];
    assert_eq!(t["operation_id"], "op-17");
    assert_eq!(t["first_multiplying_hop"], "caller");
    assert_eq!(t["end_ms"].as_f64(), Some(2250.0));
    let overlaps = t["overlaps"].as_array().unwrap();
    assert_eq!(overlaps.len(), 1);
    assert_eq!(overlaps[0]["hop"], "dependency");
    assert_eq!(overlaps[0]["start_ms"].as_f64(), Some(850.0));
    assert_eq!(overlaps[0]["end_ms"].as_f64(), Some(1400.0));
    let retry = t["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["role"] == "retry")
        .expect("a retry");
    assert_eq!(retry["hop"], "caller");
    assert_eq!(retry["gap_ms"].as_f64(), Some(50.0));
    assert_eq!(retry["finish_ms"], Value::Null);
    assert_eq!(retry["outcome_kind"], "unknown");
}

#[test]
fn top_0_leaves_timelines_out_of_the_json_summary() {
    let s = summary_value(&["--top", "0", "fixtures/incident.jsonl"]);
    assert!(s.get("timelines").is_none());
    assert!(s.get("attempts_over_time").is_some());
    let empty = summary_value(&[
        fixture("bad/README.md").to_str().unwrap(),
        "--skip-invalid",
        "--allow-empty",
    ]);
    assert!(empty.get("attempts_over_time").is_none());
}

/// 20,000 operations over ten minutes, each with a caller attempt and a dependency call,
/// every fifth retried once: enough to show that the page does not grow with the input.
fn large_input() -> Vec<u8> {
    let mut out = Vec::with_capacity(20_000 * 300);
    for i in 0..20_000u64 {
        let t = i * 30;
        out.extend(format!(
            "{{\"operation_id\":\"op-{i}\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":{t},\"finish_ms\":{},\"outcome\":{}}}\n",
            t + 40,
            if i % 5 == 0 { "503" } else { "\"ok\"" }
        ).as_bytes());
        out.extend(format!(
            "{{\"operation_id\":\"op-{i}\",\"hop\":\"dependency\",\"attempt\":1,\"start_ms\":{},\"finish_ms\":{}}}\n",
            t + 1,
            t + 38
        ).as_bytes());
        if i % 5 == 0 {
            out.extend(format!(
                "{{\"operation_id\":\"op-{i}\",\"hop\":\"caller\",\"attempt\":2,\"start_ms\":{},\"finish_ms\":{},\"outcome\":\"ok\"}}\n",
                t + 140 + i % 37,
                t + 180 + i % 37
            ).as_bytes());
        }
    }
    out
}

#[test]
fn the_page_stays_small_and_aggregated_for_a_large_input() {
    let file = TempFile::new("large.jsonl", &large_input());
    let page = html_of(&[file.path().to_str().unwrap()]);
    assert!(page.contains("20,000 operations became 44,000 attempts"));
    assert!(
        page.len() < 200_000,
        "the page is {} bytes for 20,000 operations",
        page.len()
    );
    let hover_targets = page.matches("<rect class=\"hit\"").count();
    assert!(hover_targets <= 200, "{hover_targets} time buckets");
}
