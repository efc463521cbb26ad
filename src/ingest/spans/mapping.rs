//! How spans (OTLP, Zipkin) become attempts, as the user configured it: the `--hop-map`
//! rules, the operation and run attributes, the queue hops (docs/formats.md).

use anyhow::{bail, Context, Result};

use crate::rules::HopOrder;

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

    /// The lower-case name used in `--hop-map SERVICE:KIND=HOP` and in messages.
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

/// One `--hop-map` / `[hop_map]` entry: the spans of `service` (of `kind` only, when given)
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

    /// Adds `SERVICE=HOP`, `SERVICE:KIND=HOP` or `SERVICE=-` rules (`--hop-map`, `[hop_map]`).
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
