//! The candidate retry policy of `replay` (`--candidate FILE`, TOML): per hop, how many
//! attempts, which outcomes are retried, the backoff and a retry budget; for the operation,
//! an overall deadline. Hops the file does not name keep their observed behaviour.
//!
//! ```toml
//! deadline_ms = 2000            # whole operation, from its first attempt's start
//!
//! [hops.gateway]
//! max_attempts = 1              # the gateway does not retry
//!
//! [hops.caller]
//! max_attempts = 3
//! retry_on = ["503", "429", "timeout"]
//! backoff = "full-jitter"       # none | fixed | exponential | full-jitter
//! base_ms = 100
//! cap_ms = 2000
//!
//! [hops.caller.budget]          # Finagle / Linkerd / Envoy style retry budget
//! ratio = 0.1                   # retries ≤ 10% of originals …
//! window_s = 10                 # … over a sliding 10 s window …
//! min_per_s = 1                 # … plus a floor of 1 retry per second
//! # or gRPC's retry throttling: max_tokens = 10, token_ratio = 0.1
//! ```
//!
//! Unknown keys are errors that name the key: a typo must not silently replay the
//! observed policy.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::model::{Millis, Outcome};
use crate::rules::HopOrder;

/// A valid candidate, shown in every candidate error so the fix is one copy away.
pub const EXAMPLE: &str = r#"deadline_ms = 2000
[hops.gateway]
max_attempts = 1
[hops.caller]
max_attempts = 3
retry_on = ["503", "timeout"]
backoff = "full-jitter"
base_ms = 100
cap_ms = 2000"#;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateFile {
    deadline_ms: Option<f64>,
    #[serde(default)]
    hops: BTreeMap<String, HopFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HopFile {
    max_attempts: Option<u32>,
    retry_on: Option<Vec<toml::Value>>,
    backoff: Option<String>,
    base_ms: Option<f64>,
    cap_ms: Option<f64>,
    budget: Option<BudgetFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFile {
    ratio: Option<f64>,
    window_s: Option<f64>,
    min_per_s: Option<f64>,
    max_tokens: Option<f64>,
    token_ratio: Option<f64>,
}

/// How long a retrying layer waits before retry `n` (1 = the first retry).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backoff {
    /// Straight away.
    None,
    /// `base_ms` every time.
    Fixed { base_ms: Millis },
    /// `base_ms × 2^(n−1)`, at most `cap_ms`.
    Exponential { base_ms: Millis, cap_ms: Millis },
    /// A uniform draw from `[0, min(cap_ms, base_ms × 2^(n−1)))` (AWS "full jitter").
    FullJitter { base_ms: Millis, cap_ms: Millis },
}

impl Backoff {
    /// The delay before retry `n` (≥ 1); `draw` is a uniform number in `[0, 1)`.
    pub fn delay_ms(self, n: u32, draw: f64) -> Millis {
        let exp = |base: Millis, cap: Millis| {
            // 2^63 is past any cap; stop doubling long before the float overflows.
            (base * 2f64.powi(n.saturating_sub(1).min(63) as i32)).min(cap)
        };
        match self {
            Backoff::None => 0.0,
            Backoff::Fixed { base_ms } => base_ms,
            Backoff::Exponential { base_ms, cap_ms } => exp(base_ms, cap_ms),
            Backoff::FullJitter { base_ms, cap_ms } => draw * exp(base_ms, cap_ms),
        }
    }

    pub fn is_jittered(self) -> bool {
        matches!(self, Backoff::FullJitter { .. })
    }
}

/// A retry budget shared by every operation at one hop, in time order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Finagle, Linkerd and Envoy style: a retry may start when the retries started in the
    /// last `window_ms` stay within `ratio × originals` started in it, plus a floor of
    /// `min_per_s × window` retries.
    Ratio {
        ratio: f64,
        window_ms: Millis,
        min_per_s: f64,
    },
    /// gRPC retry throttling: the bucket starts full at `max_tokens`; a failed attempt
    /// takes one token, a successful one gives back `token_ratio`; retries stop while the
    /// bucket holds `max_tokens / 2` or less.
    Tokens { max_tokens: f64, token_ratio: f64 },
}

/// What the candidate says about one hop; `None` keeps the observed behaviour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HopPolicy {
    pub max_attempts: Option<u32>,
    pub retry_on: Option<Vec<Outcome>>,
    pub backoff: Option<Backoff>,
    pub budget: Option<Budget>,
}

/// A validated candidate: one [`HopPolicy`] per hop index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidate {
    pub hops: Vec<HopPolicy>,
    /// The most time one operation may take, from its first attempt's start.
    pub deadline_ms: Option<Millis>,
}

impl Candidate {
    /// The candidate that changes nothing.
    pub fn unchanged(hops: usize) -> Candidate {
        Candidate {
            hops: vec![HopPolicy::default(); hops],
            deadline_ms: None,
        }
    }
}

pub fn load(path: &Path, hops: &HopOrder) -> Result<Candidate> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read the candidate '{}'", path.display()))?;
    parse(&text, hops).map_err(|e| {
        anyhow::anyhow!(
            "invalid candidate '{}': {}\nA valid candidate looks like this (see docs/replay.md):\n{EXAMPLE}",
            path.display(),
            format!("{e:#}").trim_end()
        )
    })
}

pub fn parse(text: &str, hops: &HopOrder) -> Result<Candidate> {
    let file: CandidateFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Candidate::unchanged(hops.len());
    if let Some(d) = file.deadline_ms {
        out.deadline_ms = Some(positive("deadline_ms", d)?);
    }
    for (name, hop) in file.hops {
        let Some(index) = hops.index_of(&name) else {
            bail!(
                "[hops.{name}]: unknown hop \"{name}\"; known hops are {}",
                hops.names().join(", ")
            );
        };
        out.hops[index as usize] = hop_policy(&name, hop)?;
    }
    Ok(out)
}

fn positive(key: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        bail!("{key} = {v}: must be a positive number")
    }
}

fn hop_policy(name: &str, hop: HopFile) -> Result<HopPolicy> {
    let at = |key: &str| format!("[hops.{name}] {key}");
    if hop.max_attempts == Some(0) {
        bail!(
            "{} = 0: the original attempt counts, so the least is 1 (no retries)",
            at("max_attempts")
        );
    }
    let retry_on = hop
        .retry_on
        .map(|values| {
            values
                .iter()
                .map(|v| {
                    let outcome = match v {
                        toml::Value::String(s) => Outcome::parse(s),
                        toml::Value::Integer(n) => Outcome::from_status(*n),
                        _ => None,
                    };
                    outcome.with_context(|| {
                        format!(
                            "{}: {v} is not an outcome; use {}",
                            at("retry_on"),
                            Outcome::EXPECTED
                        )
                    })
                })
                .collect::<Result<Vec<Outcome>>>()
        })
        .transpose()?;
    let base = |kind: &str| -> Result<f64> {
        let b = hop.base_ms.with_context(|| {
            format!(
                "{}: backoff \"{kind}\" needs base_ms, e.g. base_ms = 100",
                at("backoff")
            )
        })?;
        if !(b.is_finite() && b >= 0.0) {
            bail!("{} = {b}: must be 0 or more", at("base_ms"));
        }
        Ok(b)
    };
    let cap = || -> Result<f64> {
        match hop.cap_ms {
            None => Ok(f64::INFINITY),
            Some(c) if c.is_finite() && c >= 0.0 => Ok(c),
            Some(c) => bail!("{} = {c}: must be 0 or more", at("cap_ms")),
        }
    };
    let backoff = match hop.backoff.as_deref() {
        None => {
            if hop.base_ms.is_some() || hop.cap_ms.is_some() {
                bail!(
                    "{}: base_ms and cap_ms need a backoff, e.g. backoff = \"exponential\"",
                    at("backoff")
                );
            }
            None
        }
        Some("none") => Some(Backoff::None),
        Some("fixed") => Some(Backoff::Fixed {
            base_ms: base("fixed")?,
        }),
        Some("exponential") => Some(Backoff::Exponential {
            base_ms: base("exponential")?,
            cap_ms: cap()?,
        }),
        Some("full-jitter") => Some(Backoff::FullJitter {
            base_ms: base("full-jitter")?,
            cap_ms: cap()?,
        }),
        Some(other) => bail!(
            "{} = \"{other}\": use none, fixed, exponential or full-jitter",
            at("backoff")
        ),
    };
    let budget = hop.budget.map(|b| budget(name, b)).transpose()?;
    Ok(HopPolicy {
        max_attempts: hop.max_attempts,
        retry_on,
        backoff,
        budget,
    })
}

fn budget(name: &str, b: BudgetFile) -> Result<Budget> {
    let at = format!("[hops.{name}.budget]");
    let ratio_form = b.ratio.is_some() || b.window_s.is_some() || b.min_per_s.is_some();
    let token_form = b.max_tokens.is_some() || b.token_ratio.is_some();
    match (ratio_form, token_form) {
        (true, true) => bail!("{at}: give either ratio, window_s and min_per_s (a retry ratio) or max_tokens and token_ratio (gRPC retry throttling), not both"),
        (false, false) => bail!("{at}: empty; give ratio and window_s (e.g. ratio = 0.1, window_s = 10) or max_tokens and token_ratio"),
        (true, false) => {
            let ratio = b.ratio.with_context(|| format!("{at}: ratio is missing, e.g. ratio = 0.1"))?;
            if !(ratio.is_finite() && ratio >= 0.0) {
                bail!("{at} ratio = {ratio}: must be 0 or more");
            }
            let window = b.window_s.with_context(|| format!("{at}: window_s is missing, e.g. window_s = 10"))?;
            let min_per_s = b.min_per_s.unwrap_or(0.0);
            if !(min_per_s.is_finite() && min_per_s >= 0.0) {
                bail!("{at} min_per_s = {min_per_s}: must be 0 or more");
            }
            Ok(Budget::Ratio {
                ratio,
                window_ms: positive(&format!("{at} window_s"), window)? * 1000.0,
                min_per_s,
            })
        }
        (false, true) => {
            let max = b.max_tokens.with_context(|| format!("{at}: max_tokens is missing, e.g. max_tokens = 10"))?;
            let token_ratio = b.token_ratio.with_context(|| format!("{at}: token_ratio is missing, e.g. token_ratio = 0.1"))?;
            if !(token_ratio.is_finite() && token_ratio > 0.0) {
                bail!("{at} token_ratio = {token_ratio}: must be a positive number");
            }
            Ok(Budget::Tokens {
                max_tokens: positive(&format!("{at} max_tokens"), max)?,
                token_ratio,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_default(text: &str) -> Result<Candidate> {
        parse(text, &HopOrder::default())
    }

    #[test]
    fn reads_every_documented_key() {
        let c = parse_default(
            r#"deadline_ms = 2000
[hops.gateway]
max_attempts = 1
[hops.caller]
max_attempts = 4
retry_on = ["503", 429, "timeout"]
backoff = "exponential"
base_ms = 100
cap_ms = 1000
[hops.caller.budget]
ratio = 0.1
window_s = 10
min_per_s = 2
[hops.dependency]
backoff = "full-jitter"
base_ms = 50
[hops.dependency.budget]
max_tokens = 10
token_ratio = 0.1
"#,
        )
        .unwrap();
        assert_eq!(c.deadline_ms, Some(2000.0));
        assert_eq!(c.hops[1].max_attempts, Some(1));
        assert_eq!(
            c.hops[0].retry_on,
            Some(vec![
                Outcome::Http(503),
                Outcome::Http(429),
                Outcome::Timeout
            ])
        );
        assert_eq!(
            c.hops[0].budget,
            Some(Budget::Ratio {
                ratio: 0.1,
                window_ms: 10_000.0,
                min_per_s: 2.0
            })
        );
        assert_eq!(
            c.hops[3].budget,
            Some(Budget::Tokens {
                max_tokens: 10.0,
                token_ratio: 0.1
            })
        );
        assert_eq!(c.hops[2], HopPolicy::default());
        let b = c.hops[0].backoff.unwrap();
        assert_eq!(
            [1, 2, 3, 4, 5].map(|n| b.delay_ms(n, 0.5)),
            [100.0, 200.0, 400.0, 800.0, 1000.0]
        );
        assert_eq!(c.hops[3].backoff.unwrap().delay_ms(3, 0.5), 100.0);
    }

    #[test]
    fn errors_name_the_key_and_the_fix() {
        let cases = [
            ("[hops.gateway]\nmax_atempts = 1", "max_atempts"),
            ("deadline = 5", "deadline"),
            ("[hops.cache]\nmax_attempts = 1", "unknown hop \"cache\""),
            ("[hops.caller]\nmax_attempts = 0", "max_attempts = 0"),
            (
                "[hops.caller]\nretry_on = [\"oops\"]",
                "\"oops\" is not an outcome",
            ),
            ("[hops.caller]\nbackoff = \"linear\"", "use none, fixed"),
            ("[hops.caller]\nbackoff = \"fixed\"", "needs base_ms"),
            ("[hops.caller]\nbase_ms = 5", "need a backoff"),
            ("[hops.caller.budget]\nratio = 0.1", "window_s is missing"),
            (
                "[hops.caller.budget]\nratio = 0.1\nwindow_s = 1\nmax_tokens = 3",
                "not both",
            ),
            ("[hops.caller.budget]\nrate = 0.1", "rate"),
            ("deadline_ms = -1", "positive"),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse_default(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn an_empty_candidate_changes_nothing() {
        assert_eq!(parse_default("").unwrap(), Candidate::unchanged(4));
    }
}
