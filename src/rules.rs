//! The rules the analysis applies: the hop order, the attempt budgets and deadlines, the
//! hops where overlap is intended or lines are keyed by message, and the burst parameters. A leaf
//! module: every stage reads these, and they depend on nothing but the model's units.

use anyhow::{bail, Context, Result};

use crate::model::Millis;
use crate::words;

/// The default hop order, upstream first (docs/input.md).
pub const DEFAULT_HOPS: [&str; 4] = ["caller", "gateway", "consumer", "dependency"];

/// Attempts allowed per line at a hop unless a budget says otherwise: one original and two
/// retries, the common default of AWS, gRPC and Envoy retry policies.
pub const DEFAULT_BUDGET: u32 = 3;

/// Widest window that can hold a synchronized burst, in ms (`--burst-window`).
pub const DEFAULT_BURST_WINDOW_MS: Millis = 50.0;

/// Fewest distinct operations whose retries make a burst (`--burst-min-ops`).
pub const DEFAULT_BURST_MIN_OPS: usize = 5;

/// The HTTP 4xx statuses a repeat can fix, unless the policy's `[retryable]` says
/// otherwise: 408 Request Timeout, 425 Too Early and 429 Too Many Requests answer the
/// moment, not the request. Every other 4xx answers the request itself (a malformed body,
/// a missing permission), which an unchanged repeat gets again.
pub const DEFAULT_RETRYABLE_4XX: [u16; 3] = [408, 425, 429];

/// A status that the `[retryable]` list may name: the client errors. A 5xx is retryable
/// as it stands, and a success or redirect is no failure to retry.
pub fn retryable_status_is_valid(status: u16) -> bool {
    (400..500).contains(&status)
}

/// Fewest operations a burst may be set to need: one operation's retries are its own
/// storm, not a synchronized one (and the window search needs at least one operation).
pub const FEWEST_BURST_OPS: usize = 2;

// What each setting may be, wherever it is set: flags, the policy file, or a partial's
// header read back by `merge` (`Rules::check`). Each way in words its refusal in its own
// syntax; the rule itself is one of these.

/// A budget counts the original attempt too.
pub fn budget_is_valid(attempts: u32) -> bool {
    attempts >= 1
}

/// The finest time an input carries: OTLP's nanoseconds, a millionth of a millisecond. A
/// deadline or burst window below it cannot be told from zero, and a subnormal window
/// breaks the burst search's arithmetic (a window's own share of the trace rounds to 0).
pub const FINEST_DURATION_MS: Millis = 1e-6;

/// The widest burst window: a day. Retries that start hours apart are not synchronized in
/// any sense a retry storm is, and a wider window would call a whole trace one burst.
pub const WIDEST_BURST_WINDOW_MS: Millis = 86_400_000.0;

/// How every way in words the range of a duration: what [`duration_is_valid`] accepts.
pub const DURATION_RANGE: &str = "a number of milliseconds of at least 0.000001 (1 ns)";

/// How every way in words the range of the burst window: what [`burst_window_is_valid`]
/// accepts.
pub const BURST_WINDOW_RANGE: &str =
    "a number of milliseconds from 0.000001 (1 ns) to 86400000 (a day)";

/// A deadline: a finite number of milliseconds, no finer than any input's clock.
pub fn duration_is_valid(ms: Millis) -> bool {
    ms.is_finite() && ms >= FINEST_DURATION_MS
}

/// The burst window: a duration of at most a day.
pub fn burst_window_is_valid(ms: Millis) -> bool {
    duration_is_valid(ms) && ms <= WIDEST_BURST_WINDOW_MS
}

/// The most hops a hop order may hold. Parts of the analysis grow faster than the hop
/// count (a policy of 65,000 hops took 37 s and 4.2 GB for one event); a thousand tiers is
/// far beyond any real request path (caller, gateway, consumer, dependency are four) and
/// keeps one event's run at a fraction of a second. Services and endpoints map onto hops.
pub const MOST_HOPS: usize = 1000;

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
        if names.len() > MOST_HOPS {
            bail!(
                "--hops: {} hops; a hop order holds at most {MOST_HOPS} (hops are the tiers a request crosses, not services or endpoints: map those onto hops with [hop_map])",
                names.len()
            );
        }
        let mut seen = std::collections::HashSet::with_capacity(names.len());
        for name in &names {
            if name.is_empty() || name.contains(char::is_whitespace) {
                bail!("--hops: hop name {name:?} is empty or has spaces; use e.g. --hops caller,gateway,dependency");
            }
            if !seen.insert(name.as_str()) {
                bail!("--hops: hop \"{name}\" is listed twice");
            }
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
        self.names
            .iter()
            .position(|n| crate::model::short_eq(n.as_bytes(), name.as_bytes()))
            .map(|i| i as u16)
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

/// Parameters of the synchronized-burst rule (docs/rules.md).
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
    /// The most time one line may take, from its first attempt's start, per hop index
    /// (`None`: no deadline).
    pub deadlines: Vec<Option<Millis>>,
    /// Most sends one application attempt's inner layer may make, per hop index: the
    /// budget of the inner of two retrying layers in one hop (`None`: the hop's budget,
    /// unless the policy's `[inner_budgets]` names one; see [`Rules::inner_budget`]).
    pub inner_budgets: Vec<Option<u32>>,
    /// Whether a line's timing alone may show two retrying layers (`inferred-layers`;
    /// policy `infer_layers`).
    pub infer_layers: bool,
    /// The 4xx statuses a repeat can fix (policy `[retryable] statuses`); a repeat after
    /// any other 4xx is `retried-non-retryable`. Sorted.
    pub retryable_4xx: Vec<u16>,
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
            deadlines: vec![None; n],
            inner_budgets: vec![None; n],
            infer_layers: true,
            retryable_4xx: DEFAULT_RETRYABLE_4XX.to_vec(),
        }
    }

    /// The inner layer's budget at `hop`: its own, else the hop's.
    pub fn inner_budget(&self, hop: u16) -> u32 {
        self.inner_budgets[hop as usize].unwrap_or(self.budgets[hop as usize])
    }

    /// Whether a repeat can fix an attempt that ended in HTTP `status`: any status but a
    /// 4xx outside the retryable list.
    pub fn retry_can_fix(&self, status: u16) -> bool {
        !retryable_status_is_valid(status) || self.retryable_4xx.binary_search(&status).is_ok()
    }

    /// Checks every value against what the flags and the policy file accept, naming the
    /// setting as a user sets it: rules read back from a file (a partial's header) were
    /// not set through either, and a burst size of 0 would make the burst search fail.
    pub fn check(&self) -> Result<()> {
        let names = self.hops.names();
        if let Some((hop, n)) = names
            .iter()
            .zip(&self.budgets)
            .find(|(_, &n)| !budget_is_valid(n))
        {
            bail!("the attempt budget at {hop} is {n}; a budget counts the original attempt too, so it is at least 1 (--budget, policy [budgets])");
        }
        if let Some((hop, n)) = names
            .iter()
            .zip(&self.inner_budgets)
            .find_map(|(hop, n)| n.filter(|&n| !budget_is_valid(n)).map(|n| (hop, n)))
        {
            bail!("the inner budget at {hop} is {n}; it counts the first send too, so it is at least 1 (policy [inner_budgets])");
        }
        if let Some(s) = self
            .retryable_4xx
            .iter()
            .find(|&&s| !retryable_status_is_valid(s))
        {
            bail!("the retryable statuses list {s}; it lists HTTP 4xx statuses only (policy [retryable] statuses)");
        }
        if let Some((hop, ms)) = names
            .iter()
            .zip(&self.deadlines)
            .find_map(|(hop, d)| d.filter(|&ms| !duration_is_valid(ms)).map(|ms| (hop, ms)))
        {
            bail!("the deadline at {hop} is {} ms; a deadline is {DURATION_RANGE} (--deadline, policy [deadlines])", words::number(ms));
        }
        if !burst_window_is_valid(self.burst.window_ms) {
            bail!(
                "the burst window is {} ms; it is {BURST_WINDOW_RANGE} (--burst-window, policy [burst] window_ms)",
                words::number(self.burst.window_ms)
            );
        }
        if self.burst.min_ops < FEWEST_BURST_OPS {
            bail!(
                "the burst size is {}; a burst spans at least {FEWEST_BURST_OPS} operations (--burst-min-ops, policy [burst] min_ops)",
                self.burst.min_ops
            );
        }
        Ok(())
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
                .filter(|&n| budget_is_valid(n))
                .with_context(|| format!("--budget {spec:?}: N must be a whole number of at least 1, e.g. --budget {hop}=3"))?;
            self.budgets[index as usize] = n;
        }
        Ok(())
    }

    /// Applies `HOP=MS` deadline settings (`--deadline`, the policy's `[deadlines]`).
    pub fn set_deadlines(&mut self, flag: &str, specs: &[String]) -> Result<()> {
        for spec in specs {
            let (hop, ms) = spec.split_once('=').with_context(|| {
                format!("{flag} {spec:?}: expected HOP=MS, e.g. --deadline caller=2000")
            })?;
            let index = self.hop_for_flag(flag, hop.trim())?;
            let ms: Millis = ms
                .trim()
                .parse()
                .ok()
                .filter(|&ms| duration_is_valid(ms))
                .with_context(|| {
                    format!(
                        "{flag} {spec:?}: MS must be {DURATION_RANGE}, e.g. --deadline {hop}=2000"
                    )
                })?;
            self.deadlines[index as usize] = Some(ms);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_that_no_flag_or_policy_accepts_are_refused_naming_the_setting() {
        assert!(Rules::new(HopOrder::default()).check().is_ok());
        type Edit = fn(&mut Rules);
        let cases: [(Edit, &str); 6] = [
            (|r| r.budgets[1] = 0, "attempt budget at gateway is 0"),
            (|r| r.deadlines[0] = Some(0.0), "deadline at caller is 0 ms"),
            (
                |r| r.deadlines[3] = Some(-5.0),
                "deadline at dependency is -5 ms",
            ),
            (|r| r.burst.window_ms = 0.0, "burst window is 0 ms"),
            (
                |r| r.burst.window_ms = f64::INFINITY,
                "burst window is inf ms",
            ),
            (|r| r.burst.min_ops = 0, "burst size is 0"),
        ];
        for (edit, expected) in cases {
            let mut rules = Rules::new(HopOrder::default());
            edit(&mut rules);
            let error = rules.check().expect_err(expected).to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn deadlines_are_set_per_hop_and_bad_ones_name_the_flag() {
        let mut rules = Rules::new(HopOrder::default());
        rules
            .set_deadlines("--deadline", &["gateway=250.5".to_string()])
            .expect("valid");
        assert_eq!(rules.deadlines, vec![None, Some(250.5), None, None]);
        for (spec, expected) in [
            ("gateway", "expected HOP=MS"),
            ("gateway=0", "at least 0.000001"),
            ("gateway=inf", "at least 0.000001"),
            ("edge=5", "unknown hop \"edge\""),
        ] {
            let err = format!(
                "{:#}",
                rules
                    .set_deadlines("--deadline", &[spec.to_string()])
                    .unwrap_err()
            );
            assert!(
                err.contains("--deadline") && err.contains(expected),
                "{spec}: {err}"
            );
        }
    }
}
