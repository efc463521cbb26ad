//! The policy file (`--policy attempt-funnel.toml`): a repository's committed retry
//! contract: failure conditions, per-hop attempt budgets and deadlines, hops allowed to
//! overlap (hedged reads), queue hops and burst parameters. Flags given on the command line override it.
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
//! [deadlines]
//! caller = 2000
//!
//! # Two retrying layers in one hop (docs/rules.md): the inner layer's budget, and
//! # whether the timing alone may show the layers.
//! infer_layers = true
//! [inner_budgets]
//! caller = 3
//!
//! # The 4xx statuses a retry can fix (default 408, 425, 429).
//! [retryable]
//! statuses = [408, 409, 425, 429]
//!
//! [hop_map]
//! checkout = "caller"
//! "api-gateway:server" = "-"
//! ```
//!
//! It may also say how the input names our keys (docs/input.md, key mapping):
//!
//! ```toml
//! attempt_base = 0
//! time_unit = "s"
//!
//! [fields]
//! operation_id = "request_id"
//! hop = "kubernetes.labels.app"
//!
//! [hop_values]
//! checkout-api = "caller"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::rules::HopOrder;

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
    #[serde(default, deserialize_with = "whole_per_hop")]
    pub budgets: BTreeMap<String, u32>,
    /// Hops where overlapping attempts are intended (hedged requests).
    #[serde(default)]
    pub allow_overlap: Vec<String>,
    /// Hops that are queue consumers: lines keyed by message ID, repeats are redeliveries.
    pub queue_hops: Option<Vec<String>>,
    #[serde(default)]
    pub burst: BurstPolicy,
    /// Most time one line may take per hop, in ms, from its first attempt's start.
    #[serde(default)]
    pub deadlines: BTreeMap<String, f64>,
    /// Span service (or `service:kind`) → hop, or `-` for spans that are not attempts
    /// (OTLP and Zipkin input; docs/formats.md).
    #[serde(default)]
    pub hop_map: BTreeMap<String, String>,
    /// The number of the original attempt in the input (`--attempt-base`): 1 or 0.
    #[serde(default, deserialize_with = "whole_or_none")]
    pub attempt_base: Option<u32>,
    /// The unit of numeric times in the input (`--time-unit`).
    pub time_unit: Option<String>,
    /// Our input key → the input's key or path (`--field`).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// The input's hop name → our hop (`--hop-value`).
    #[serde(default)]
    pub hop_values: BTreeMap<String, String>,
    /// Most sends the inner of two retrying layers in one hop may make per attempt of the
    /// outer one, per hop (default: the hop's budget).
    #[serde(default, deserialize_with = "whole_per_hop")]
    pub inner_budgets: BTreeMap<String, u32>,
    /// Whether a line's timing alone may show two retrying layers (default true).
    pub infer_layers: Option<bool>,
    #[serde(default)]
    pub retryable: RetryablePolicy,
}

/// `[retryable]`: what a retry can fix.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetryablePolicy {
    /// The HTTP 4xx statuses a retry can fix, replacing the default list; a retry after
    /// any other 4xx is `retried-non-retryable`.
    #[serde(default, deserialize_with = "wholes_or_none")]
    pub statuses: Option<Vec<u16>>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BurstPolicy {
    pub window_ms: Option<f64>,
    #[serde(default, deserialize_with = "whole_or_none")]
    pub min_ops: Option<usize>,
}

/// A whole number of the policy in `T`'s range. TOML's own reader refuses a float with
/// the float's every digit (330 of them for `5e-324`); this one says what is wrong in words,
/// and the message's excerpt of the file names the key.
struct Whole<T>(T);

impl<'de, T: TryFrom<i64> + TryFrom<u64>> Deserialize<'de> for Whole<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Visitor};
        struct Reader<T>(std::marker::PhantomData<T>);
        impl<T: TryFrom<i64> + TryFrom<u64>> Visitor<'_> for Reader<T> {
            type Value = Whole<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<Whole<T>, E> {
                in_range(v)
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<Whole<T>, E> {
                in_range(v)
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<Whole<T>, E> {
                Err(E::custom(format!(
                    "{} is not a whole number",
                    crate::words::number(v)
                )))
            }
        }
        fn in_range<T: TryFrom<V>, V: std::fmt::Display + Copy, E: Error>(
            v: V,
        ) -> Result<Whole<T>, E> {
            T::try_from(v)
                .map(Whole)
                .map_err(|_| E::custom(format!("{v} is out of range for this setting")))
        }
        deserializer.deserialize_any(Reader(std::marker::PhantomData))
    }
}

fn whole_per_hop<'de, D, T>(deserializer: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    let read = BTreeMap::<String, Whole<T>>::deserialize(deserializer)?;
    Ok(read.into_iter().map(|(hop, n)| (hop, n.0)).collect())
}

fn whole_or_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    Ok(Option::<Whole<T>>::deserialize(deserializer)?.map(|n| n.0))
}

fn wholes_or_none<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    let read = Option::<Vec<Whole<T>>>::deserialize(deserializer)?;
    Ok(read.map(|all| all.into_iter().map(|n| n.0).collect()))
}

impl Policy {
    /// Checks what the TOML types cannot: the hop list, budgets and burst parameters in
    /// range. Errors name the key, as the flags' errors name the flag.
    fn check(&self) -> Result<(), String> {
        if let Some(hops) = &self.hops {
            if hops.is_empty() {
                return Err("hops = []: name at least one hop, upstream first, e.g. hops = [\"caller\", \"gateway\", \"dependency\"]".to_string());
            }
            if hops.len() > crate::rules::MOST_HOPS {
                return Err(format!(
                    "hops lists {} hops; a hop order holds at most {} (hops are the tiers a request crosses: map services onto them with [hop_map])",
                    hops.len(),
                    crate::rules::MOST_HOPS
                ));
            }
            let mut seen = std::collections::HashSet::with_capacity(hops.len());
            for hop in hops {
                if hop.is_empty() || hop.contains(char::is_whitespace) {
                    return Err(format!("hops: hop name {hop:?} is empty or has spaces"));
                }
                if !seen.insert(hop.as_str()) {
                    return Err(format!("hops: hop \"{hop}\" is listed twice"));
                }
            }
        }
        if let Some((hop, _)) = self
            .budgets
            .iter()
            .find(|(_, &n)| !crate::rules::budget_is_valid(n))
        {
            return Err(format!(
                "budgets.{hop} = 0: a budget counts the original attempt too, so it is at least 1"
            ));
        }
        if let Some((hop, n)) = self
            .inner_budgets
            .iter()
            .find(|(_, &n)| !crate::rules::budget_is_valid(n))
        {
            return Err(format!(
                "inner_budgets.{hop} = {n}: an inner budget counts the first send too, so it is at least 1"
            ));
        }
        if let Some(s) = self
            .retryable
            .statuses
            .iter()
            .flatten()
            .find(|&&s| !crate::rules::retryable_status_is_valid(s))
        {
            return Err(format!(
                "retryable.statuses lists {s}: it lists HTTP 4xx statuses only (a 5xx is retryable as it stands), e.g. statuses = [408, 425, 429]"
            ));
        }
        if let Some((hop, ms)) = self
            .deadlines
            .iter()
            .find(|(_, ms)| !crate::rules::duration_is_valid(**ms))
        {
            return Err(format!(
                "deadlines.{hop} = {}: a deadline is {}",
                crate::words::number(*ms),
                crate::rules::DURATION_RANGE
            ));
        }
        if let Some(w) = self
            .burst
            .window_ms
            .filter(|&w| !crate::rules::burst_window_is_valid(w))
        {
            return Err(format!(
                "burst.window_ms = {}: the window is {}",
                crate::words::number(w),
                crate::rules::BURST_WINDOW_RANGE
            ));
        }
        if let Some(base) = self.attempt_base.filter(|&b| b > 1) {
            return Err(format!(
                "attempt_base = {base}: the original attempt is number 1 (our default) or 0"
            ));
        }
        if let Some(unit) = self
            .time_unit
            .as_deref()
            .filter(|u| crate::ingest::TimeUnit::parse(u).is_none())
        {
            return Err(format!(
                "time_unit = \"{unit}\": use one of {}",
                crate::ingest::TimeUnit::all_names()
            ));
        }
        if let Some(n) = self
            .burst
            .min_ops
            .filter(|&n| n < crate::rules::FEWEST_BURST_OPS)
        {
            return Err(format!(
                "burst.min_ops = {n}: a burst spans several operations, so at least {}",
                crate::rules::FEWEST_BURST_OPS
            ));
        }
        Ok(())
    }

    /// Checks that every hop the policy names (in `budgets`, `allow_overlap`, `queue_hops`)
    /// is in the hop order in force, which `--hops` may have set.
    pub fn check_hops(&self, hops: &HopOrder) -> Result<()> {
        let named = self
            .budgets
            .keys()
            .map(|hop| ("budgets", hop))
            .chain(self.deadlines.keys().map(|hop| ("deadlines", hop)))
            .chain(self.inner_budgets.keys().map(|hop| ("inner_budgets", hop)))
            .chain(self.allow_overlap.iter().map(|hop| ("allow_overlap", hop)))
            .chain(
                self.queue_hops
                    .iter()
                    .flatten()
                    .map(|hop| ("queue_hops", hop)),
            );
        for (key, hop) in named {
            if hops.index_of(hop).is_none() {
                return Err(with_example(&format!(
                    "{key} names unknown hop \"{hop}\"; known hops are {}",
                    hops.names().join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// The largest policy file read. A real policy is a few hundred bytes; the limit keeps a
/// wrong path (`--policy /dev/zero`, a log file) from being read without end.
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The policy file a run was given (`--policy`), read once: every setting taken from it
/// (rules, input mapping, failure conditions) is resolved from this one reading.
#[derive(Debug, Default)]
pub struct PolicyFile {
    /// `None`: no policy was given, and `policy` is the default one.
    pub path: Option<PathBuf>,
    pub policy: Policy,
}

impl PolicyFile {
    /// Reads the policy at `path`, or stands for none.
    pub fn read(path: Option<&Path>) -> Result<PolicyFile> {
        Ok(match path {
            Some(path) => PolicyFile {
                path: Some(path.to_path_buf()),
                policy: load(path)?,
            },
            None => PolicyFile::default(),
        })
    }

    /// `invalid policy 'PATH'`: what an error in one of its settings is reported under.
    pub fn invalid(&self) -> String {
        let path = self.path.as_deref().unwrap_or(Path::new("-"));
        format!("invalid policy '{}'", path.display())
    }
}

pub fn load(path: &Path) -> Result<Policy> {
    use std::io::Read;
    let name = crate::escape::terminal(&path.display().to_string()).into_owned();
    let context = || format!("could not read policy '{name}'");
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .with_context(context)?
        .take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(context)?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        anyhow::bail!(
            "policy '{name}' is larger than {} KiB: a policy is a short TOML file (see docs/ci.md); check the path",
            MAX_POLICY_BYTES >> 10
        );
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "policy '{name}' is not UTF-8 text: a policy is a TOML file (see docs/ci.md)"
        )
    })?;
    parse(&text).with_context(|| format!("invalid policy '{name}'"))
}

pub fn parse(text: &str) -> Result<Policy> {
    let policy: Policy =
        toml::from_str(text).map_err(|e| with_example(e.to_string().trim_end()))?;
    policy.check().map_err(|e| with_example(&e))?;
    Ok(policy)
}

/// A policy error, followed by a valid policy to copy from.
fn with_example(message: &str) -> anyhow::Error {
    anyhow::anyhow!("{message}\nA valid policy looks like this (see docs/ci.md):\n{EXAMPLE}")
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
    fn a_hop_order_past_the_cap_is_refused_at_once() {
        let names: Vec<String> = (0..=crate::rules::MOST_HOPS)
            .map(|i| format!("\"h{i}\""))
            .collect();
        let err = format!(
            "{:#}",
            parse(&format!("hops = [{}]", names.join(","))).unwrap_err()
        );
        assert!(err.contains("holds at most 1000"), "{err}");
        let fits = &names[..crate::rules::MOST_HOPS];
        assert!(parse(&format!("hops = [{}]", fits.join(","))).is_ok());
    }

    #[test]
    fn values_out_of_range_are_named_with_an_example() {
        let cases = [
            ("hops = []", "hops = []"),
            ("hops = [\"caller\", \"caller\"]", "listed twice"),
            ("[budgets]\ngateway = 0", "budgets.gateway = 0"),
            ("[burst]\nwindow_ms = -5.0", "burst.window_ms = -5"),
            ("[burst]\nmin_ops = 1", "burst.min_ops = 1"),
            ("[deadlines]\ncaller = 0", "deadlines.caller = 0"),
            ("[deadlines]\ncaller = -2.5", "deadlines.caller = -2.5"),
            ("attempt_base = 2", "attempt_base = 2"),
            ("time_unit = \"min\"", "time_unit = \"min\""),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.contains("fail_on = ["), "{text}: no example in {err}");
        }
    }

    #[test]
    fn hops_the_policy_names_must_be_in_the_hop_order() {
        let hops = HopOrder::default();
        let p = parse("allow_overlap = [\"cache\"]").unwrap();
        let err = format!("{:#}", p.check_hops(&hops).unwrap_err());
        assert!(
            err.contains("allow_overlap names unknown hop \"cache\""),
            "{err}"
        );
        let p = parse("[deadlines]\nedge = 900").unwrap();
        let err = format!("{:#}", p.check_hops(&hops).unwrap_err());
        assert!(
            err.contains("deadlines names unknown hop \"edge\""),
            "{err}"
        );
        let p = parse("[budgets]\nedge = 2").unwrap();
        let err = format!("{:#}", p.check_hops(&hops).unwrap_err());
        assert!(err.contains("budgets names unknown hop \"edge\""), "{err}");
        parse(EXAMPLE).unwrap().check_hops(&hops).unwrap();
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

    /// Fuzz target (see `crate::fuzz`): no policy text makes the policy reader panic.
    #[test]
    fn fuzz_policy() {
        let hops = crate::rules::HopOrder::default();
        crate::fuzz::run("policy", |bytes| {
            if let Ok(policy) = parse(&String::from_utf8_lossy(bytes)) {
                let _ = policy.check_hops(&hops);
            }
        });
    }
}
