//! The resolved, validated configuration: what the CLI asked for, in the terms the pipeline
//! uses. Nothing below this module sees clap types.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::model::Millis;

/// The default hop order of SPEC §2, upstream first.
pub const DEFAULT_HOPS: [&str; 4] = ["caller", "gateway", "consumer", "dependency"];

/// Attempts allowed per line at a hop unless a budget says otherwise: one original and two
/// retries, the common default of AWS, gRPC and Envoy retry policies (SPEC §3).
pub const DEFAULT_BUDGET: u32 = 3;

/// Widest window that can hold a synchronized burst, in ms (SPEC §3, `--burst-window`).
pub const DEFAULT_BURST_WINDOW_MS: Millis = 50.0;

/// Fewest distinct operations whose retries make a burst (SPEC §3, `--burst-min-ops`).
pub const DEFAULT_BURST_MIN_OPS: usize = 5;

/// The hops in order, upstream first. Indexes into it are the `hop: u16` of every event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopOrder {
    names: Vec<String>,
}

impl Default for HopOrder {
    fn default() -> Self {
        HopOrder {
            names: DEFAULT_HOPS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl HopOrder {
    pub fn new(names: Vec<String>) -> Result<HopOrder> {
        if names.is_empty() {
            bail!("--hops needs at least one hop name, e.g. --hops caller,gateway,dependency");
        }
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || name.contains(char::is_whitespace) {
                bail!("--hops: hop name {name:?} is empty or has spaces; use e.g. --hops caller,gateway,dependency");
            }
            if names[..i].contains(name) {
                bail!("--hops: hop \"{name}\" is listed twice");
            }
        }
        if names.len() > u16::MAX as usize {
            bail!("--hops: too many hops");
        }
        Ok(HopOrder { names })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn name(&self, index: u16) -> &str {
        &self.names[index as usize]
    }

    pub fn index_of(&self, name: &str) -> Option<u16> {
        self.names.iter().position(|n| n == name).map(|i| i as u16)
    }

    /// The hop of `client-` events and of point events without a hop: `caller`, or the
    /// first hop when the order has no caller.
    pub fn caller_index(&self) -> u16 {
        self.index_of("caller").unwrap_or(0)
    }

    /// The hop of `server-` events: `dependency`, or the last hop.
    pub fn dependency_index(&self) -> u16 {
        self.index_of("dependency")
            .unwrap_or((self.names.len() - 1) as u16)
    }
}

/// Parameters of the synchronized-burst rule (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstParams {
    pub window_ms: Millis,
    pub min_ops: usize,
}

/// Everything the classification rules depend on; one value per hop where per-hop.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub hops: HopOrder,
    /// Maximum attempts per line, per hop index.
    pub budgets: Vec<u32>,
    /// Hops where overlapping attempts are intended (hedged reads), per hop index.
    pub overlap_allowed: Vec<bool>,
    /// Hops whose lines are keyed by message ID (queue consumers), per hop index.
    pub queue_hops: Vec<bool>,
    pub burst: BurstParams,
}

impl Rules {
    pub fn new(hops: HopOrder) -> Rules {
        let n = hops.len();
        let queue_hops = hops.names().iter().map(|h| h == "consumer").collect();
        Rules {
            hops,
            budgets: vec![DEFAULT_BUDGET; n],
            overlap_allowed: vec![false; n],
            queue_hops,
            burst: BurstParams {
                window_ms: DEFAULT_BURST_WINDOW_MS,
                min_ops: DEFAULT_BURST_MIN_OPS,
            },
        }
    }

    /// Names of hops as a list of per-hop flags (`allow_overlap`, `queue_hops`).
    pub fn hop_flags(&self, what: &str, names: &[String]) -> Result<Vec<bool>> {
        let mut flags = vec![false; self.hops.len()];
        for name in names {
            flags[self.hop_for_flag(what, name)? as usize] = true;
        }
        Ok(flags)
    }

    /// Applies `HOP=N` budget settings.
    pub fn set_budgets(&mut self, specs: &[String]) -> Result<()> {
        for spec in specs {
            let (hop, n) = spec.split_once('=').with_context(|| {
                format!("--budget {spec:?}: expected HOP=N, e.g. --budget gateway=2")
            })?;
            let index = self.hop_for_flag("--budget", hop.trim())?;
            let n: u32 = n
                .trim()
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .with_context(|| format!("--budget {spec:?}: N must be a whole number of at least 1, e.g. --budget {hop}=3"))?;
            self.budgets[index as usize] = n;
        }
        Ok(())
    }

    pub fn hop_for_flag(&self, flag: &str, hop: &str) -> Result<u16> {
        self.hops.index_of(hop).with_context(|| {
            format!(
                "{flag}: unknown hop \"{hop}\"; known hops are {}",
                self.hops.names().join(", ")
            )
        })
    }
}

/// What to do with a bad input line (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadInputPolicy {
    /// Report each, go on with the good lines, exit 2 at the end.
    Report,
    /// Stop at the first bad line.
    Strict,
    /// Report the count, keep the analysis exit code.
    Skip,
}

/// Which line format a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    Auto,
    Jsonl,
    Logfmt,
    /// OpenTelemetry OTLP JSON, one `{"resourceSpans":[…]}` per line (docs/formats.md).
    Otlp,
    /// Zipkin v2 JSON: a span, or an array of spans, per line (docs/formats.md).
    Zipkin,
    /// Jaeger JSON documents, `{"data":[trace, …]}` (docs/formats.md).
    Jaeger,
}

/// The span kinds of OpenTelemetry and Zipkin, as far as the hop mapping cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpanKind {
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    pub const ALL: [SpanKind; 5] = [
        SpanKind::Internal,
        SpanKind::Server,
        SpanKind::Client,
        SpanKind::Producer,
        SpanKind::Consumer,
    ];

    /// The lower-case name used in `--hop SERVICE:KIND=HOP` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Internal => "internal",
            SpanKind::Server => "server",
            SpanKind::Client => "client",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
        }
    }

    pub fn parse(name: &str) -> Option<SpanKind> {
        SpanKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// One `--hop` / `[hop_map]` entry: the spans of `service` (of `kind` only, when given)
/// are attempts at `hop`, or not attempts at all when `hop` is `None` (written `-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopRule {
    pub service: String,
    pub kind: Option<SpanKind>,
    pub hop: Option<u16>,
}

/// The span attribute whose value is the test run unless `--run-attribute` names another.
pub const DEFAULT_RUN_ATTRIBUTE: &str = "cicd.pipeline.run.id";

/// How spans (OTLP, Zipkin) become attempts: see docs/formats.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanMapping {
    /// Attribute that holds the operation ID; `None` means the trace ID.
    pub operation_attribute: Option<String>,
    /// Attribute that holds the test run ID.
    pub run_attribute: String,
    /// Explicit service → hop rules, later rules winning over earlier ones.
    pub hop_rules: Vec<HopRule>,
    /// Per hop index: a queue hop, whose attempts are its consumer spans.
    pub queue_hops: Vec<bool>,
    /// The hop whose attempts are the server spans (requests served): `dependency`, or the
    /// last hop.
    pub serving_hop: u16,
}

impl SpanMapping {
    pub fn new(hops: &HopOrder, queue_hops: Vec<bool>) -> SpanMapping {
        SpanMapping {
            operation_attribute: None,
            run_attribute: DEFAULT_RUN_ATTRIBUTE.to_string(),
            hop_rules: Vec::new(),
            queue_hops,
            serving_hop: hops.dependency_index(),
        }
    }

    /// Adds `SERVICE=HOP`, `SERVICE:KIND=HOP` or `SERVICE=-` rules (`--hop`, `[hop_map]`).
    pub fn add_hop_rules(&mut self, flag: &str, specs: &[String], hops: &HopOrder) -> Result<()> {
        for spec in specs {
            let (left, hop) = spec.rsplit_once('=').with_context(|| {
                format!("{flag} {spec:?}: expected SERVICE=HOP or SERVICE:KIND=HOP, e.g. {flag} api-gateway=gateway")
            })?;
            let (service, kind) = match left.rsplit_once(':') {
                Some((service, kind)) => match SpanKind::parse(kind) {
                    Some(k) => (service, Some(k)),
                    None => bail!(
                        "{flag} {spec:?}: unknown span kind \"{kind}\"; use client, server, producer, consumer or internal"
                    ),
                },
                None => (left, None),
            };
            let service = service.trim();
            if service.is_empty() {
                bail!(
                    "{flag} {spec:?}: the service name is empty, e.g. {flag} api-gateway=gateway"
                );
            }
            let hop = match hop.trim() {
                "-" => None,
                name => Some(hops.index_of(name).with_context(|| {
                    format!(
                        "{flag} {spec:?}: unknown hop \"{name}\"; known hops are {} (or '-' for spans that are not attempts)",
                        hops.names().join(", ")
                    )
                })?),
            };
            self.hop_rules.push(HopRule {
                service: service.to_string(),
                kind,
                hop,
            });
        }
        Ok(())
    }
}

/// The output formats of `analyze`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Json,
    Jsonl,
    Csv,
    Markdown,
    /// The per-operation rows as a Parquet file (binary: only to `--output FILE`).
    Parquet,
    Html,
}

/// Where input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputPath {
    Stdin,
    File(PathBuf),
}

impl InputPath {
    pub fn display(&self) -> String {
        match self {
            InputPath::Stdin => "<stdin>".to_string(),
            InputPath::File(p) => p.display().to_string(),
        }
    }
}

/// Input options shared by every subcommand that reads events.
#[derive(Debug, Clone, PartialEq)]
pub struct InputConfig {
    pub paths: Vec<InputPath>,
    pub format: InputFormat,
    pub bad_input: BadInputPolicy,
    /// Show a progress line on stderr while reading (stderr is a terminal, not under CI).
    pub progress: bool,
    /// How OTLP and Zipkin spans become attempts.
    pub spans: SpanMapping,
}

/// The resolved configuration of `analyze`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    /// How many of the worst operations the summary lists.
    pub top: usize,
    pub gate: GateConfig,
}

/// The resolved configuration of `show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowConfig {
    pub input: InputConfig,
    pub rules: Rules,
    /// `None`: the input's only operation (`show trace.json`).
    pub operation_id: Option<String>,
    pub test_run_id: Option<String>,
}

/// The CI gate's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub conditions: Vec<crate::gate::Condition>,
    pub report_only: bool,
    pub junit: Option<PathBuf>,
}
