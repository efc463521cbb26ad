//! The policy file (`--policy attempt-funnel.toml`): a repository's committed retry
//! contract: failure conditions, per-hop attempt budgets, hops allowed to overlap (hedged
//! reads), queue hops and burst parameters. Flags given on the command line override it.
//!
//! ```toml
//! hops = ["caller", "gateway", "consumer", "dependency"]
//! fail_on = ["nested-retry > 0", "overlap > 1%", "healthy < 95%"]
//! allow_overlap = ["dependency"]
//! queue_hops = ["consumer"]
//!
//! [budgets]
//! caller = 3
//! gateway = 2
//!
//! [burst]
//! window_ms = 50
//! min_ops = 5
//!
//! [hop_map]
//! checkout = "caller"
//! "api-gateway:server" = "-"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

/// A valid policy, shown in every policy error so the fix is one copy away.
pub const EXAMPLE: &str = r#"fail_on = ["nested-retry > 0", "overlap > 1%"]
allow_overlap = ["dependency"]
[budgets]
gateway = 2"#;

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Hop order, upstream first.
    pub hops: Option<Vec<String>>,
    /// Failure conditions, in the `--fail-on` grammar.
    #[serde(default)]
    pub fail_on: Vec<String>,
    /// Most attempts per line, per hop.
    #[serde(default)]
    pub budgets: BTreeMap<String, u32>,
    /// Hops where overlapping attempts are intended (hedged requests).
    #[serde(default)]
    pub allow_overlap: Vec<String>,
    /// Hops that are queue consumers: lines keyed by message ID, repeats are redeliveries.
    pub queue_hops: Option<Vec<String>>,
    #[serde(default)]
    pub burst: BurstPolicy,
    /// Span service (or `service:kind`) → hop, or `-` for spans that are not attempts
    /// (OTLP and Zipkin input; docs/formats.md).
    #[serde(default)]
    pub hop_map: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BurstPolicy {
    pub window_ms: Option<f64>,
    pub min_ops: Option<usize>,
}

pub fn load(path: &Path) -> Result<Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read policy '{}'", path.display()))?;
    parse(&text).with_context(|| format!("invalid policy '{}'", path.display()))
}

pub fn parse(text: &str) -> Result<Policy> {
    toml::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "{}\nA valid policy looks like this (see docs/ci.md):\n{EXAMPLE}",
            e.to_string().trim_end()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_policy_parses() {
        let p = parse(EXAMPLE).unwrap();
        assert_eq!(p.fail_on.len(), 2);
        assert_eq!(p.budgets.get("gateway"), Some(&2));
    }

    #[test]
    fn an_unknown_key_is_named_with_an_example() {
        let err = format!("{:#}", parse("fail-on = [\"x > 1\"]").unwrap_err());
        assert!(err.contains("fail-on"), "{err}");
        assert!(err.contains("fail_on = ["), "{err}");
    }

    #[test]
    fn hop_map_reads_services_and_kinds() {
        let p = parse("[hop_map]\ncheckout = \"caller\"\n\"edge:server\" = \"-\"").unwrap();
        assert_eq!(
            p.hop_map.get("checkout").map(String::as_str),
            Some("caller")
        );
        assert_eq!(p.hop_map.get("edge:server").map(String::as_str), Some("-"));
    }

    #[test]
    fn a_wrong_type_is_named() {
        let err = format!("{:#}", parse("[budgets]\ngateway = \"two\"").unwrap_err());
        assert!(err.contains("gateway") || err.contains("budgets"), "{err}");
    }
}
