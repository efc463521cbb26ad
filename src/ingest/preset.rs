//! Presets: logs that tools write in a shape of their own, read as they are
//! (`--preset envoy|istio|k6`, docs/input.md). A preset is a key mapping ([`KeyMapping`],
//! the one `--field` builds) plus what no mapping can say: which lines are attempts, how
//! many attempts one line stands for, and the outcome from the tool's own codes.
//!
//! A preset reaches only the files it recognises by their first line ([`Preset::matches`]):
//! k6's JSON output beside a service's own JSON Lines log in one run reads each file as
//! what it is, so a load test's caller side joins the services' logs.
//!
//! ```text
//! {"start_time":"2026-11-30T10:00:00.000Z","duration":812,"response_code":200,"response_flags":"-","request_id":"op-1","upstream_cluster":"inventory","upstream_request_attempt_count":3}
//! {"type":"Point","metric":"http_req_duration","data":{"time":"2026-11-30T10:00:00.9Z","value":850.5,"tags":{"operation_id":"op-1","scenario":"checkout","status":"200"}}}
//! ```

use serde_json::{Map, Value};

use super::fields::CheckedLine;
use super::mapping::{KeyMapping, KeyPath};
use crate::model::{named_enum, EventFields, Outcome};
use crate::rules::HopOrder;

named_enum! {
    /// A tool whose log is read as it writes it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Preset {
        Envoy => "envoy",
        Istio => "istio",
        K6 => "k6",
        Ecs => "ecs",
    }
}

/// What a preset's lines look like, told from the first line of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// An access log in JSON: `start_time` and `response_code`, the keys Envoy's and Istio's
    /// formats share.
    AccessLog,
    /// k6's `--out json` lines: `{"type":"Point"|"Metric","metric":…,"data":…}`.
    K6,
    /// An Elastic Common Schema log record: `@timestamp` and `ecs.version`.
    Ecs,
}

/// Everything one preset is: one entry per [`Preset`], in its order.
struct Spec {
    preset: Preset,
    /// What it reads, for `--help` and messages.
    reads: &'static str,
    shape: Shape,
    /// Where our keys are in the tool's lines (`--field` pairs; '-': the tool has none, so a
    /// key of ours that happens to be in the line is not read).
    fields: &'static [(&'static str, &'static str)],
    /// Our hop of its attempts; `None`: the caller hop (or the first hop).
    hop: Option<&'static str>,
    /// Which lines are passed by as not attempts: a line without an operation ID always
    /// is (a health check, a probe, a load test's setup request).
    passes: &'static str,
    /// How to log the operation ID, said with the count of lines passed by.
    missing_id: &'static str,
}

/// The access-log keys both Envoy presets read: Istio's default names, which an Envoy
/// `json_format` written as docs/input.md shows uses too. The outcome is made from
/// `response_code` and `response_flags` ([`access_log_outcome`]). A `test_run_id` key (a
/// header the load test sends, logged as docs/input.md shows) is read as ours.
const ACCESS_LOG_FIELDS: [(&str, &str); 6] = [
    ("operation_id", "request_id"),
    ("start", "start_time"),
    ("duration_ms", "duration"),
    ("outcome", "-"),
    ("hop", "-"),
    ("attempt", "-"),
];

const SPECS: [Spec; 4] = [
    Spec {
        preset: Preset::Envoy,
        reads: "Envoy's JSON access log with %UPSTREAM_REQUEST_ATTEMPT_COUNT%: each line is one request, the gateway's attempts at it",
        shape: Shape::AccessLog,
        fields: &[("target", "upstream_cluster")],
        hop: Some("gateway"),
        passes: "lines without a request ID (health checks, probes)",
        missing_id: "log %REQ(X-REQUEST-ID)% as request_id",
    },
    Spec {
        preset: Preset::Istio,
        reads: "Istio's default JSON access log: each inbound line is one attempt that reached a server (outbound lines are passed by)",
        shape: Shape::AccessLog,
        fields: &[("target", "authority")],
        hop: Some("gateway"),
        passes: "outbound lines (the calling sidecar's view of requests whose attempts the inbound lines hold), and lines without a request ID (health checks, probes)",
        missing_id: "Istio logs x-request-id as request_id; the calling service must pass the header on",
    },
    Spec {
        preset: Preset::K6,
        reads: "k6's JSON output (k6 run --out json=FILE): each http_req_duration point is one request of the load test, at the caller hop",
        shape: Shape::K6,
        fields: &[
            ("operation_id", "data.tags.operation_id"),
            ("test_run_id", "data.tags.scenario"),
            ("finish", "data.time"),
            ("duration_ms", "data.value"),
            ("target", "data.tags.name"),
            ("outcome", "-"),
            ("hop", "-"),
            ("attempt", "-"),
        ],
        hop: None,
        passes: "k6 metrics other than http_req_duration, and requests without the operation_id tag (setup, teardown)",
        missing_id: "tag each request with its operation ID: http.get(url, { tags: { operation_id: id } })",
    },
    Spec {
        preset: Preset::Ecs,
        reads: "an Elastic Common Schema log (ecs-logging, Elastic agents, Filebeat): each record with an event.duration is one attempt at the caller hop, the operation its trace.id",
        shape: Shape::Ecs,
        fields: &[
            ("operation_id", "trace.id"),
            ("finish", "@timestamp"),
            ("duration_ns", "event.duration"),
            ("target", "url.path"),
            ("outcome", "-"),
            ("hop", "-"),
            ("attempt", "-"),
        ],
        hop: None,
        passes: "records without event.duration (the operation's other log records), and records without trace.id",
        missing_id: "log inside a trace (ecs-logging takes trace.id from the active OpenTelemetry or APM span), or map the key that holds the operation with --field operation_id=KEY",
    },
];

impl Preset {
    fn spec(self) -> &'static Spec {
        let spec = &SPECS[self as usize];
        debug_assert_eq!(spec.preset, self, "SPECS is in the order of Preset");
        spec
    }

    /// What the preset reads, in a sentence.
    pub fn reads(self) -> &'static str {
        self.spec().reads
    }

    /// Which lines it passes by, as not attempts.
    pub fn passes(self) -> &'static str {
        self.spec().passes
    }

    /// How to log the operation ID so that a line is read as an attempt.
    pub fn missing_id(self) -> &'static str {
        self.spec().missing_id
    }

    /// The mapping of the tool's keys onto ours.
    pub fn mapping(self) -> Result<KeyMapping, String> {
        let mut mapping = KeyMapping::default();
        let pairs = self.spec().fields.iter().chain(match self.spec().shape {
            Shape::AccessLog => ACCESS_LOG_FIELDS.iter(),
            Shape::K6 | Shape::Ecs => [].iter(),
        });
        let origin = format!("--preset {self}");
        mapping.add_fields(
            &origin,
            pairs.map(|&(ours, theirs)| (ours.to_string(), theirs.to_string())),
        )?;
        Ok(mapping)
    }

    /// Whether `first_line`, a file's first non-blank line, is what this tool writes.
    pub fn matches(self, first_line: &[u8]) -> bool {
        let Ok(object) = serde_json::from_slice::<Map<String, Value>>(first_line) else {
            return false;
        };
        if object.contains_key("operation_id") || object.contains_key("operationId") {
            return false;
        }
        match self.spec().shape {
            Shape::AccessLog => {
                object.contains_key("start_time") && object.contains_key("response_code")
            }
            Shape::Ecs => {
                object.contains_key("@timestamp")
                    && (object.contains_key("ecs.version") || object.contains_key("ecs"))
            }
            Shape::K6 => {
                object.contains_key("metric")
                    && matches!(
                        object.get("type").and_then(Value::as_str),
                        Some("Point" | "Metric")
                    )
            }
        }
    }

    /// Reads one line of the tool's log, as `mapping` ([`Preset::mapping`]) says.
    pub fn read(
        self,
        mut object: Map<String, Value>,
        mapping: &KeyMapping,
        hops: &HopOrder,
    ) -> Result<Read<CheckedLine<'static>>, String> {
        let spec = self.spec();
        let outcome = match self {
            Preset::K6 => {
                let is_request = object.get("type").and_then(Value::as_str) == Some("Point")
                    && object.get("metric").and_then(Value::as_str) == Some("http_req_duration");
                if !is_request {
                    return Ok(Read::Passed);
                }
                k6_outcome(&object)?
            }
            Preset::Ecs => {
                if ecs_value(&object, &ECS_FIELDS.duration).is_none() {
                    return Ok(Read::Passed);
                }
                ecs_outcome(&object)?
            }
            Preset::Envoy | Preset::Istio => {
                // Envoy writes '-' for a value it does not have.
                object.retain(|_, v| v.as_str() != Some("-"));
                if self == Preset::Istio && !is_inbound(&object)? {
                    return Ok(Read::Passed);
                }
                access_log_outcome(&object)?
            }
        };
        let row = mapping.read_object(&object)?;
        let mut line = match mapping.check(row, hops) {
            // A health check or a setup request: not an attempt, never an error.
            Err(message) if super::fields::has_no_operation(&message) => return Ok(Read::Passed),
            checked => checked?,
        };
        if let Some(hop) = spec.hop {
            line.hop = hops.index_of(hop).ok_or_else(|| {
                format!(
                    "--preset {self} puts its attempts at the {hop} hop, which the hop order ({}) does not have: add it to --hops",
                    hops.names().join(", ")
                )
            })?;
        }
        line.outcome = outcome;
        if self != Preset::Envoy {
            return Ok(Read::Attempt(line));
        }
        let count = attempt_count(&object)?;
        Ok(Read::GatewayAttempts {
            last: line,
            count: count.max(1),
        })
    }
}

/// What one line of a tool's log is, its attempts as `L` (checked lines, then the same
/// with their strings hashed).
#[derive(Debug)]
pub enum Read<L> {
    /// One attempt.
    Attempt(L),
    /// The gateway's attempts at a request: `count` (at least 1), numbered from 1, the last
    /// one `last` and the others made from it by [`GatewayAttempt`]. Made only where each
    /// is kept or spilled, so that what a line holds does not grow with its count (20 000
    /// lines of 1 000 attempts each took 3 GB when each line held its attempts).
    GatewayAttempts { last: L, count: u32 },
    /// Not an attempt (another k6 metric, an Istio outbound line): passed by and counted.
    Passed,
}

impl<L> Read<L> {
    /// The same line with its attempt made into an `M`.
    pub fn map<M>(self, f: impl FnOnce(L) -> M) -> Read<M> {
        match self {
            Read::Attempt(line) => Read::Attempt(f(line)),
            Read::GatewayAttempts { last, count } => Read::GatewayAttempts {
                last: f(last),
                count,
            },
            Read::Passed => Read::Passed,
        }
    }
}

/// Istio names a server's inbound cluster `inbound|PORT||`, and a client's `outbound|…`.
fn is_inbound(object: &Map<String, Value>) -> Result<bool, String> {
    match object.get("upstream_cluster").and_then(Value::as_str) {
        Some(cluster) => Ok(cluster.starts_with("inbound|") || cluster.starts_with("InboundPassthrough")),
        None => Err("no upstream_cluster: the istio preset tells a server's inbound line from a client's outbound line by it".into()),
    }
}

/// `upstream_request_attempt_count`, or where a log names it after the header Envoy sends
/// back with `include_attempt_count_in_response`, `x-envoy-attempt-count`: the gateway's
/// attempts at the request.
fn attempt_count(object: &Map<String, Value>) -> Result<u32, String> {
    const KEY: &str = "upstream_request_attempt_count";
    const HEADER: &str = "x-envoy-attempt-count";
    let value = [KEY, HEADER]
        .iter()
        .find_map(|key| object.get(*key).filter(|v| !v.is_null()));
    let value = value.ok_or_else(|| {
        format!("no {KEY}: add \"{KEY}\": \"%UPSTREAM_REQUEST_ATTEMPT_COUNT%\" to Envoy's json_format (docs/input.md), or read each line as one attempt with --preset istio")
    })?;
    let n = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if n.fract() == 0.0 && (0.0..=f64::from(MAX_ATTEMPTS_PER_LINE)).contains(&n) => {
            Ok(n as u32)
        }
        _ => Err(format!(
            "{KEY} must be a whole number from 0 to {MAX_ATTEMPTS_PER_LINE}, got {value}"
        )),
    }
}

/// The most attempts one access-log line may stand for. Envoy's retry policies allow a
/// handful (num_retries defaults to 1); a number past this is a broken line, and taking
/// it would let one line allocate without bound.
const MAX_ATTEMPTS_PER_LINE: u32 = 1000;

/// Attempt `number` of the gateway's `count` attempts at one request, told apart from the
/// request's line (the last attempt) by these fields. The attempts are numbered from 1,
/// the last with the request's outcome, the earlier ones failed (the gateway retries only
/// after a failure; which one the log does not say). The log has no time of its own for
/// each attempt: one attempt is the request, with its times; several carry the request's
/// start and finish as bounds, marked `untimed`, so that no rule reads a time into them
/// (docs/input.md). A request the gateway answered itself (`count` 0: no route, no
/// healthy upstream, circuit open) is one attempt with that answer: it stopped at the
/// gateway.
#[derive(Debug, Clone, Copy)]
pub struct GatewayAttempt {
    pub attempt: u32,
    pub untimed: bool,
    /// `None`: the request's own outcome (the last attempt).
    pub failed: Option<Outcome>,
}

impl GatewayAttempt {
    /// Each of `count` attempts, in order.
    pub fn all(count: u32) -> impl Iterator<Item = GatewayAttempt> {
        (1..=count).map(move |k| GatewayAttempt {
            attempt: k,
            untimed: count > 1,
            failed: (k < count).then_some(Outcome::Error),
        })
    }

    /// The attempt's fields, made from those of the request's line.
    pub fn apply(self, fields: &mut EventFields) {
        fields.attempt = Some(self.attempt);
        fields.untimed = self.untimed;
        if let Some(failed) = self.failed {
            fields.outcome = Some(failed);
        }
    }
}

/// Envoy's response flags that say how the request's last upstream attempt ended, in the
/// order they are looked for (a timeout before the retry limit it caused). A flag found
/// here wins over the response code, which Envoy made up itself for these (a 503 for a
/// reset, a 504 for a timeout). Flags not listed (fault injection, …) leave the code.
const RESPONSE_FLAGS: [(&str, Outcome); 14] = [
    ("UT", Outcome::Timeout),    // upstream request timeout
    ("SI", Outcome::Timeout),    // stream idle timeout
    ("UMSDR", Outcome::Timeout), // upstream max stream duration reached
    ("DC", Outcome::Cancelled),  // downstream connection termination
    ("UO", Outcome::Rejected),   // upstream overflow (circuit breaking)
    ("RL", Outcome::Rejected),   // rate limited locally
    ("UF", Outcome::Error),      // upstream connection failure
    ("UR", Outcome::Error),      // upstream remote reset
    ("UC", Outcome::Error),      // upstream connection termination
    ("LR", Outcome::Error),      // connection local reset
    ("URX", Outcome::Error),     // upstream retry limit exceeded
    ("UH", Outcome::Error),      // no healthy upstream
    ("NR", Outcome::Error),      // no route
    ("UPE", Outcome::Error),     // upstream protocol error
];

/// The outcome of an access-log line: a flag of [`RESPONSE_FLAGS`], else the response code
/// (0, or none: no response was sent, and no outcome is known).
fn access_log_outcome(object: &Map<String, Value>) -> Result<Option<Outcome>, String> {
    let flags: Vec<&str> = match object.get("response_flags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split(',').map(str::trim).collect(),
        Some(other) => {
            return Err(format!(
                "response_flags must be a string such as \"UT\" or \"UF,URX\", got {other}"
            ))
        }
    };
    if let Some(&(_, outcome)) = RESPONSE_FLAGS.iter().find(|(flag, _)| flags.contains(flag)) {
        return Ok(Some(outcome));
    }
    status("response_code", object.get("response_code"))
}

/// An HTTP status written as a number or a string; 0 (no response) is no outcome.
fn status(key: &str, value: Option<&Value>) -> Result<Option<Outcome>, String> {
    let code = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    };
    match code {
        Some(0) => Some(None),
        Some(code) => Outcome::from_status(code).map(Some),
        None => None,
    }
    .ok_or_else(|| {
        format!(
            "{key} must be an HTTP status from 100 to 599 (or 0, no response), got {}",
            value.map_or_else(String::new, Value::to_string)
        )
    })
}

/// k6's error code of a request that timed out ("request timeout", k6's error codes).
const K6_REQUEST_TIMEOUT: &str = "1050";

/// The outcome of a k6 request: its `status` tag, or, for status 0 (no response), a
/// timeout when its `error_code` tag is k6's request timeout and an error otherwise.
fn k6_outcome(object: &Map<String, Value>) -> Result<Option<Outcome>, String> {
    let tags = object.get("data").and_then(|d| d.get("tags"));
    let tag = |name: &str| tags.and_then(|t| t.get(name));
    match status("data.tags.status", tag("status"))? {
        Some(outcome) => Ok(Some(outcome)),
        None if tag("status").is_some() => Ok(Some(
            match tag("error_code").and_then(|c| {
                c.as_str()
                    .map(str::to_owned)
                    .or_else(|| c.as_i64().map(|n| n.to_string()))
            }) {
                Some(code) if code == K6_REQUEST_TIMEOUT => Outcome::Timeout,
                _ => Outcome::Error,
            },
        )),
        None => Ok(None),
    }
}

/// The ECS fields the preset reads beyond its mapping, each a [`KeyPath`] (nested, as
/// ecs-logging writes them, or flat as `"event.duration"`), parsed once.
struct EcsFields {
    duration: KeyPath,
    status: KeyPath,
    error: KeyPath,
    outcome: KeyPath,
}

static ECS_FIELDS: std::sync::LazyLock<EcsFields> = std::sync::LazyLock::new(|| {
    let path = |p| KeyPath::parse(p).expect("the ECS field names are valid paths");
    EcsFields {
        duration: path("event.duration"),
        status: path("http.response.status_code"),
        error: path("error.type"),
        outcome: path("event.outcome"),
    }
});

/// The value of an ECS field in a record; `None` for null.
fn ecs_value<'a>(object: &'a Map<String, Value>, field: &KeyPath) -> Option<&'a Value> {
    field.find(object).filter(|v| !v.is_null())
}

/// The outcome of an ECS record: `http.response.status_code`; else a timeout when
/// `error.type` names one (`TimeoutError`, `ReadTimeout`); else `event.outcome` (`success`,
/// `failure`).
fn ecs_outcome(object: &Map<String, Value>) -> Result<Option<Outcome>, String> {
    let fields = &*ECS_FIELDS;
    let code = ecs_value(object, &fields.status);
    if let Some(outcome) = status("http.response.status_code", code)? {
        return Ok(Some(outcome));
    }
    let error = ecs_value(object, &fields.error).and_then(Value::as_str);
    if error.is_some_and(|e| e.to_ascii_lowercase().contains("timeout")) {
        return Ok(Some(Outcome::Timeout));
    }
    Ok(
        match ecs_value(object, &fields.outcome).and_then(Value::as_str) {
            Some("success") => Some(Outcome::Ok),
            Some("failure") => Some(Outcome::Error),
            _ if error.is_some() => Some(Outcome::Error),
            _ => None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_entry_per_preset_in_its_order() {
        for (spec, preset) in SPECS.iter().zip(Preset::ALL) {
            assert_eq!(spec.preset, preset);
            preset.mapping().unwrap_or_else(|e| panic!("{preset}: {e}"));
        }
    }

    fn object(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn each_preset_recognises_its_tools_first_line_only() {
        let envoy = br#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":200,"request_id":"a"}"#;
        let k6 = br#"{"type":"Metric","data":{"type":"gauge"},"metric":"vus"}"#;
        let ours = br#"{"operation_id":"a","start_time":"x","response_code":200}"#;
        assert!(Preset::Envoy.matches(envoy) && Preset::Istio.matches(envoy));
        assert!(!Preset::K6.matches(envoy));
        assert!(Preset::K6.matches(k6) && !Preset::Envoy.matches(k6));
        for preset in Preset::ALL {
            assert!(!preset.matches(ours), "{preset}");
            assert!(!preset.matches(b"operation=a t_ms=1"), "{preset}");
        }
    }

    #[test]
    fn flags_name_timeouts_and_resets_before_the_code() {
        let cases = [
            (
                r#"{"response_code":504,"response_flags":"UT"}"#,
                Some(Outcome::Timeout),
            ),
            (
                r#"{"response_code":503,"response_flags":"UF,URX"}"#,
                Some(Outcome::Error),
            ),
            (
                r#"{"response_code":503,"response_flags":"UO"}"#,
                Some(Outcome::Rejected),
            ),
            (
                r#"{"response_code":0,"response_flags":"DC"}"#,
                Some(Outcome::Cancelled),
            ),
            (
                r#"{"response_code":"503","response_flags":"FI"}"#,
                Some(Outcome::Http(503)),
            ),
            (r#"{"response_code":200}"#, Some(Outcome::Http(200))),
            (r#"{"response_code":0}"#, None),
        ];
        for (line, expected) in cases {
            assert_eq!(access_log_outcome(&object(line)), Ok(expected), "{line}");
        }
        assert!(access_log_outcome(&object(r#"{"response_code":700}"#)).is_err());
    }

    #[test]
    fn k6_status_zero_is_a_timeout_or_an_error_by_its_error_code() {
        let line = |tags: &str| object(&format!(r#"{{"data":{{"tags":{tags}}}}}"#));
        assert_eq!(
            k6_outcome(&line(r#"{"status":"200"}"#)),
            Ok(Some(Outcome::Http(200)))
        );
        assert_eq!(
            k6_outcome(&line(r#"{"status":"0","error_code":"1050"}"#)),
            Ok(Some(Outcome::Timeout))
        );
        assert_eq!(
            k6_outcome(&line(r#"{"status":"0","error_code":"1211"}"#)),
            Ok(Some(Outcome::Error))
        );
        assert_eq!(k6_outcome(&line("{}")), Ok(None));
    }
}
