//! Generate: synthetic attempt logs for trying the tool, testing a gate and benchmarking
//! (`attempt-funnel generate`). Seeded and byte-reproducible; every operation classifies
//! under the default rules (docs/rules.md) as the shape it was generated from, and `--expected`
//! writes that class per operation so tests can check the analyzer against it.
//!
//! The output is the native JSON Lines format (docs/input.md), one whole attempt per line, keys
//! always in this order:
//!
//! ```text
//! {"operation_id":"op-000123","test_run_id":"run-1","hop":"caller","attempt":1,"start_ms":1700000000123,"finish_ms":1700000000456,"outcome":"ok","target":"sku-42","message_id":"msg-000123"}
//! ```
//!
//! Lines are sorted by `start_ms` (ties keep generation order), so operations interleave as
//! in a real log. Operations start in time order and no attempt starts long after its
//! operation, so a heap of the lines not yet due is all the memory the merge needs.
//!
//! How each shape is made to classify as intended, under the default budget (3), burst
//! window (50 ms) and burst minimum (5 operations):
//!
//! | shape | hops that repeat | why its class cannot be another |
//! |---|---|---|
//! | `healthy` | none | one attempt per hop |
//! | `nested-retry` | caller and gateway | the first caller attempt always spends all 3 gateway attempts, so the caller retries too |
//! | `fan-out` | none (3–6 distinct targets at the dependency) | distinct targets under one gateway attempt are fan-out, not retries |
//! | `redelivery` | consumer (by message ID) | each delivery calls the dependency once, under its own parent |
//! | `overlap` | gateway | the gateway gives up after 250 ms; the dependency call it abandoned runs ≥ 300 ms |
//! | `burst` | caller | groups retry at one instant on a fixed 1 s schedule: see [`Plan`] |
//! | `over-budget` | dependency (4–5 attempts) | its retries are the only ones at the dependency, and never crowd: see [`Plan`] |

use std::collections::{BTreeSet, BinaryHeap};
use std::fmt::Write as _;
use std::io::{self, Write};

use anyhow::{bail, Result};

use crate::burst::{ln_poisson_tail, BURST_P_VALUE, MIN_BACKGROUND_RETRIES, NEIGHBOUR_WINDOWS};
use crate::classify::Class;
use crate::rules::{DEFAULT_BURST_MIN_OPS, DEFAULT_BURST_WINDOW_MS};
use crate::words::noun;

/// Timestamps start here (2023-11-14T22:13:20Z): epoch milliseconds, as real logs have.
pub const BASE_MS: u64 = 1_700_000_000_000;

/// Mean time between operation arrivals (exponential gaps). A mix
/// with many over-budget operations spreads them further apart (see [`Plan`]).
pub const MEAN_GAP_MS: f64 = 2.0;

/// Targets are `sku-1` … `sku-500`.
const TARGETS: u64 = 500;

/// The fixed schedule of burst retries: every burst group retries on a multiple of this.
/// Longer than the neighbourhood the burst rule looks at on each side
/// (`NEIGHBOUR_WINDOWS` + 1 windows = 550 ms by default), so one burst never raises the
/// expected rate that the next burst is tested against.
pub const BURST_PERIOD_MS: u64 = 1000;

/// The shortest backoff before a burst group's first retry (the next tick of the schedule
/// at least this far after the aligned failure).
const BURST_MIN_BACKOFF_MS: u64 = 500;

/// A burst group is sized so that even a busy neighbourhood leaves its count this unlikely
/// by chance: a thousand times below the rule's threshold, as margin.
const BURST_GROUP_P_VALUE: f64 = BURST_P_VALUE / 1000.0;

/// Standard deviations above its mean that the neighbours' retry count may reach (plus a
/// few retries) when sizing burst groups: nested retries at the caller are random.
const NEIGHBOUR_SIGMAS: f64 = 6.0;

/// Over-budget retries take one slot each on a grid this far apart, so that any burst
/// window holds at most `min_ops − 1` of them: no window can ever be a burst.
/// ⌊50 / 4⌋ + 1 = 13 ms by default.
pub const OVER_BUDGET_SLOT_MS: u64 =
    (DEFAULT_BURST_WINDOW_MS as u64) / (DEFAULT_BURST_MIN_OPS as u64 - 1) + 1;

/// Share of the over-budget slots that may be taken on average; operations arrive further
/// apart when a mix would take more, so that a retry rarely waits more than a slot or two.
const OVER_BUDGET_SLOT_LOAD: f64 = 0.6;

/// Mean retries of an over-budget operation (4 or 5 attempts).
const OVER_BUDGET_MEAN_RETRIES: f64 = 3.5;

/// Mean caller retries of a nested-retry operation is below this (it has 2 or 3 caller
/// attempts).
const NESTED_MAX_CALLER_RETRIES: f64 = 2.0;

/// What `generate` is asked for, resolved from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub ops: u64,
    pub seed: u64,
    pub mix: Mix,
}

/// How an operation is generated. Each shape classifies as one class (docs/rules.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    Healthy,
    NestedRetry,
    FanOut,
    Redelivery,
    Overlap,
    Burst,
    OverBudget,
}

impl Shape {
    pub const ALL: [Shape; 7] = [
        Shape::Healthy,
        Shape::NestedRetry,
        Shape::FanOut,
        Shape::Redelivery,
        Shape::Overlap,
        Shape::Burst,
        Shape::OverBudget,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Healthy => "healthy",
            Shape::NestedRetry => "nested-retry",
            Shape::FanOut => "fan-out",
            Shape::Redelivery => "redelivery",
            Shape::Overlap => "overlap",
            Shape::Burst => "burst",
            Shape::OverBudget => "over-budget",
        }
    }

    /// The class every operation of this shape gets under the default rules.
    pub fn class(self) -> Class {
        match self {
            Shape::Healthy => Class::Healthy,
            Shape::NestedRetry => Class::NestedRetry,
            Shape::FanOut => Class::FanOut,
            Shape::Redelivery => Class::Redelivery,
            Shape::Overlap => Class::Overlap,
            Shape::Burst => Class::SynchronizedBurst,
            Shape::OverBudget => Class::OverBudget,
        }
    }

    /// Accepts the shape names, the class names, and `_` for `-`.
    fn parse(name: &str) -> Option<Shape> {
        let name = name.trim().replace('_', "-");
        if name == "synchronized-burst" {
            return Some(Shape::Burst);
        }
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The share of operations per shape (relative weights).
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    weights: [f64; 7],
}

impl Default for Mix {
    /// A mostly healthy load test with each kind of storm.
    fn default() -> Self {
        Mix {
            weights: [70.0, 8.0, 7.0, 5.0, 5.0, 5.0, 0.0],
        }
    }
}

impl Mix {
    /// Parses `SHAPE=WEIGHT` items: the shapes named make up the whole mix (shapes not
    /// named get none); no items at all is the default mix.
    pub fn parse(items: &[String]) -> Result<Mix> {
        let items: Vec<&String> = items.iter().filter(|i| !i.trim().is_empty()).collect();
        if items.is_empty() {
            return Ok(Mix::default());
        }
        let mut mix = Mix { weights: [0.0; 7] };
        for item in items {
            let Some((name, weight)) = item.split_once('=') else {
                bail!("--mix: {item:?} is not SHAPE=WEIGHT, e.g. --mix healthy=70,over-budget=5");
            };
            let Some(shape) = Shape::parse(name) else {
                bail!(
                    "--mix: unknown shape {:?}; the shapes are {}",
                    name.trim(),
                    Shape::ALL.map(Shape::name).join(", ")
                );
            };
            let weight: f64 = match weight.trim().parse() {
                Ok(w) if f64::is_finite(w) && w >= 0.0 => w,
                _ => bail!(
                    "--mix: the weight of {} must be a number ≥ 0, not {:?}",
                    shape.name(),
                    weight.trim()
                ),
            };
            mix.weights[shape.index()] = weight;
        }
        if mix.weights.iter().sum::<f64>() <= 0.0 {
            bail!("--mix: every weight is 0; give at least one shape a weight, e.g. healthy=1");
        }
        Ok(mix)
    }

    pub fn weight(&self, shape: Shape) -> f64 {
        self.weights[shape.index()]
    }
}

/// SplitMix64: small, fast and fully specified, so a seed gives the same stream on every
/// platform and version.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponentially distributed with the given mean.
    fn exponential(&mut self, mean: f64) -> f64 {
        -(1.0 - self.unit()).ln() * mean
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u64 - 1) as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hop {
    Caller,
    Gateway,
    Consumer,
    Dependency,
}

impl Hop {
    fn name(self) -> &'static [u8] {
        match self {
            Hop::Caller => b"caller",
            Hop::Gateway => b"gateway",
            Hop::Consumer => b"consumer",
            Hop::Dependency => b"dependency",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Error,
    Timeout,
    Unavailable,
    TooManyRequests,
}

impl Outcome {
    fn name(self) -> &'static [u8] {
        match self {
            Outcome::Ok => b"ok",
            Outcome::Error => b"error",
            Outcome::Timeout => b"timeout",
            Outcome::Unavailable => b"503",
            Outcome::TooManyRequests => b"429",
        }
    }
}

/// One attempt line, waiting in the heap until it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    start_ms: u64,
    /// Generation order: breaks ties of `start_ms`.
    seq: u64,
    finish_ms: u64,
    op: u64,
    target: u16,
    hop: Hop,
    attempt: u8,
    outcome: Outcome,
}

impl Ord for Line {
    /// Reversed, so that `BinaryHeap` pops the earliest line first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.start_ms, other.seq).cmp(&(self.start_ms, self.seq))
    }
}

impl PartialOrd for Line {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// An attempt as a shape generates it.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    hop: Hop,
    attempt: u8,
    start_ms: u64,
    finish_ms: u64,
    outcome: Outcome,
    target: u16,
}

/// What the mix implies for timing and group sizes.
///
/// - **Bursts.** A burst group's operations fail at one instant and retry together on the
///   next ticks of a fixed [`BURST_PERIOD_MS`] schedule, so their retries at the caller
///   share one instant and no other group's retries are in its neighbourhood. The only
///   other caller retries are those of nested-retry operations, at a rate the mix sets;
///   `burst_group_min` is the smallest count that stays below the rule's p-value even when
///   the neighbourhood holds [`NEIGHBOUR_SIGMAS`] standard deviations more of them. Every
///   instant of a group holds at least that many operations.
/// - **Over budget.** Over-budget retries are the only retries at the dependency, and each
///   takes its own slot on a [`OVER_BUDGET_SLOT_MS`] grid, so no burst window can hold
///   retries of `min_ops` operations there. When a mix has more over-budget operations than
///   the slots can take at [`OVER_BUDGET_SLOT_LOAD`], operations arrive further apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub mean_gap_ms: f64,
    pub burst_group_min: u64,
    pub burst_group_max: u64,
    /// Relative chance that a draw is each shape (a burst draw is a whole group).
    draw_weights: [f64; 7],
}

impl Plan {
    pub fn new(mix: &Mix) -> Plan {
        let singles: f64 = Shape::ALL
            .iter()
            .filter(|&&s| s != Shape::Burst)
            .map(|&s| mix.weight(s))
            .sum();
        // Upper bounds of a draw's chance to be a shape: burst draws only lower them.
        let upper = |s: Shape| {
            if singles > 0.0 {
                mix.weight(s) / singles
            } else {
                0.0
            }
        };
        let slot_demand =
            upper(Shape::OverBudget) * OVER_BUDGET_MEAN_RETRIES * OVER_BUDGET_SLOT_MS as f64;
        let mean_gap_ms = MEAN_GAP_MS.max(slot_demand / OVER_BUDGET_SLOT_LOAD);

        let window = DEFAULT_BURST_WINDOW_MS;
        let nested_per_window =
            upper(Shape::NestedRetry) / mean_gap_ms * NESTED_MAX_CALLER_RETRIES * window;
        let windows = NEIGHBOUR_WINDOWS as f64;
        let neighbours = windows * nested_per_window;
        let neighbours_high = neighbours + NEIGHBOUR_SIGMAS * neighbours.sqrt() + NEIGHBOUR_SIGMAS;
        // The background is the median window of a side, at least one retry: bounded by
        // the mean window of a side this far above its expectation.
        let lambda_high = (neighbours_high / windows).max(MIN_BACKGROUND_RETRIES);
        let mut burst_group_min = DEFAULT_BURST_MIN_OPS as u64;
        while ln_poisson_tail(burst_group_min, lambda_high) >= BURST_GROUP_P_VALUE.ln() {
            burst_group_min += 1;
        }
        let burst_group_max = 2 * burst_group_min;
        let mean_group = (burst_group_min + burst_group_max) as f64 / 2.0;

        let mut draw_weights = mix.weights;
        draw_weights[Shape::Burst.index()] /= mean_group;
        Plan {
            mean_gap_ms,
            burst_group_min,
            burst_group_max,
            draw_weights,
        }
    }

    /// Draws a shape; with `allow_burst` false, a burst draw is replaced by another shape
    /// (healthy when the mix has no other).
    fn draw(&self, rng: &mut Rng, allow_burst: bool) -> Shape {
        let weight = |s: Shape| {
            if s == Shape::Burst && !allow_burst {
                0.0
            } else {
                self.draw_weights[s.index()]
            }
        };
        let total: f64 = Shape::ALL.iter().map(|&s| weight(s)).sum();
        let mut x = rng.unit() * total;
        for s in Shape::ALL {
            let w = weight(s);
            if w > 0.0 {
                if x < w {
                    return s;
                }
                x -= w;
            }
        }
        // Rounding at the top end, or nothing left to draw.
        Shape::ALL
            .into_iter()
            .rev()
            .find(|&s| weight(s) > 0.0)
            .unwrap_or(Shape::Healthy)
    }
}

/// What was generated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub ops: u64,
    pub lines: u64,
    pub per_shape: [u64; 7],
    pub mean_gap_ms: f64,
    pub burst_group_min: u64,
}

impl Stats {
    /// One line for stderr.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "attempt-funnel: generated {} {}, {} {} (",
            self.ops,
            noun(self.ops, "operation", "operations"),
            self.lines,
            noun(self.lines, "attempt line", "attempt lines"),
        );
        for (i, shape) in Shape::ALL.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(s, "{sep}{} {}", shape.name(), self.per_shape[i]);
        }
        let _ = write!(
            s,
            "); operations every {:.2} ms on average, burst groups of {}+ operations",
            self.mean_gap_ms, self.burst_group_min
        );
        s
    }
}

/// Writes `opts.ops` operations to `out` as JSON Lines and, when given, `operation_id,class`
/// per operation to `expected`.
pub fn generate<W: Write, E: Write>(
    opts: &Options,
    out: W,
    expected: Option<E>,
) -> io::Result<Stats> {
    let mut gen = Generator::new(opts, out, expected);
    gen.run()?;
    Ok(Stats {
        ops: gen.next_op - 1,
        lines: gen.lines,
        per_shape: gen.per_shape,
        mean_gap_ms: gen.plan.mean_gap_ms,
        burst_group_min: gen.plan.burst_group_min,
    })
}

/// Output is flushed to the writer in chunks of about this many bytes.
const CHUNK_BYTES: usize = 1 << 20;

struct Generator<W, E> {
    ops: u64,
    plan: Plan,
    rng: Rng,
    out: W,
    expected: Option<E>,
    buf: Vec<u8>,
    expected_buf: Vec<u8>,
    heap: BinaryHeap<Line>,
    scratch: Vec<Attempt>,
    seq: u64,
    next_op: u64,
    lines: u64,
    per_shape: [u64; 7],
    /// Digits of zero-padded operation numbers (`op-000123`).
    width: usize,
    run_id: Vec<u8>,
    /// Taken over-budget slots (indexes on the [`OVER_BUDGET_SLOT_MS`] grid) from now on.
    slots: BTreeSet<u64>,
}

impl<W: Write, E: Write> Generator<W, E> {
    fn new(opts: &Options, out: W, expected: Option<E>) -> Generator<W, E> {
        Generator {
            ops: opts.ops,
            plan: Plan::new(&opts.mix),
            rng: Rng::new(opts.seed),
            out,
            expected,
            buf: Vec::with_capacity(CHUNK_BYTES + 4096),
            expected_buf: Vec::new(),
            heap: BinaryHeap::new(),
            scratch: Vec::with_capacity(32),
            seq: 0,
            next_op: 1,
            lines: 0,
            per_shape: [0; 7],
            width: opts.ops.to_string().len().max(6),
            run_id: format!("run-{}", opts.seed).into_bytes(),
            slots: BTreeSet::new(),
        }
    }

    fn run(&mut self) -> io::Result<()> {
        if self.expected.is_some() {
            self.expected_buf.extend_from_slice(b"operation_id,class\n");
        }
        let mut t = BASE_MS as f64;
        while self.next_op <= self.ops {
            t += self.rng.exponential(self.plan.mean_gap_ms);
            let t0 = t as u64;
            let remaining = self.ops - self.next_op + 1;
            let shape = self
                .plan
                .draw(&mut self.rng, remaining >= self.plan.burst_group_min);
            // Nothing generated from here on starts before t0.
            self.write_due(t0)?;
            // Retries are wanted only after t0 from now on: forget the slots before it.
            while self
                .slots
                .first()
                .is_some_and(|&slot| slot < t0 / OVER_BUDGET_SLOT_MS)
            {
                self.slots.pop_first();
            }
            if shape == Shape::Burst {
                self.burst_group(t0, remaining)?;
            } else {
                self.scratch.clear();
                let target = self.rng.range(1, TARGETS);
                match shape {
                    Shape::Healthy => self.healthy(t0, target),
                    Shape::NestedRetry => self.nested_retry(t0, target),
                    Shape::FanOut => self.fan_out(t0, target),
                    Shape::Redelivery => self.redelivery(t0, target),
                    Shape::Overlap => self.overlap(t0, target),
                    Shape::OverBudget => self.over_budget(t0, target),
                    Shape::Burst => unreachable!("handled above"),
                }
                self.finish_op(shape)?;
            }
        }
        self.write_due(u64::MAX)?;
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()?;
        if let Some(expected) = self.expected.as_mut() {
            expected.write_all(&self.expected_buf)?;
            expected.flush()?;
        }
        Ok(())
    }

    /// Queues the attempts in `scratch` as the next operation's lines.
    fn finish_op(&mut self, shape: Shape) -> io::Result<()> {
        let op = self.next_op;
        self.next_op += 1;
        self.per_shape[shape.index()] += 1;
        self.lines += self.scratch.len() as u64;
        for a in &self.scratch {
            self.seq += 1;
            self.heap.push(Line {
                start_ms: a.start_ms,
                seq: self.seq,
                finish_ms: a.finish_ms,
                op,
                target: a.target,
                hop: a.hop,
                attempt: a.attempt,
                outcome: a.outcome,
            });
        }
        if self.expected.is_some() {
            self.expected_buf.extend_from_slice(b"op-");
            push_padded(&mut self.expected_buf, op, self.width);
            self.expected_buf.push(b',');
            self.expected_buf
                .extend_from_slice(shape.class().name().as_bytes());
            self.expected_buf.push(b'\n');
            if self.expected_buf.len() >= CHUNK_BYTES {
                if let Some(expected) = self.expected.as_mut() {
                    expected.write_all(&self.expected_buf)?;
                }
                self.expected_buf.clear();
            }
        }
        Ok(())
    }

    /// Writes every queued line that starts before `t_ms`.
    fn write_due(&mut self, t_ms: u64) -> io::Result<()> {
        while self.heap.peek().is_some_and(|l| l.start_ms < t_ms) {
            let line = self.heap.pop().expect("peeked");
            self.format_line(&line);
            if self.buf.len() >= CHUNK_BYTES {
                self.out.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    fn format_line(&mut self, l: &Line) {
        let b = &mut self.buf;
        b.extend_from_slice(b"{\"operation_id\":\"op-");
        push_padded(b, l.op, self.width);
        b.extend_from_slice(b"\",\"test_run_id\":\"");
        b.extend_from_slice(&self.run_id);
        b.extend_from_slice(b"\",\"hop\":\"");
        b.extend_from_slice(l.hop.name());
        b.extend_from_slice(b"\",\"attempt\":");
        push_u64(b, u64::from(l.attempt));
        b.extend_from_slice(b",\"start_ms\":");
        push_u64(b, l.start_ms);
        b.extend_from_slice(b",\"finish_ms\":");
        push_u64(b, l.finish_ms);
        b.extend_from_slice(b",\"outcome\":\"");
        b.extend_from_slice(l.outcome.name());
        b.extend_from_slice(b"\",\"target\":\"sku-");
        push_u64(b, u64::from(l.target));
        b.extend_from_slice(b"\",\"message_id\":\"msg-");
        push_padded(b, l.op, self.width);
        b.extend_from_slice(b"\"}\n");
    }

    fn push(
        &mut self,
        hop: Hop,
        attempt: u64,
        start_ms: u64,
        finish_ms: u64,
        outcome: Outcome,
        target: u64,
    ) {
        self.scratch.push(Attempt {
            hop,
            attempt: attempt as u8,
            start_ms,
            finish_ms,
            outcome,
            target: target as u16,
        });
    }

    /// Network and queueing time between two hops.
    fn net(&mut self) -> u64 {
        self.rng.range(1, 3)
    }

    /// A failed call: a timeout after 1 s, or a fast failure.
    fn fail(&mut self, choices: &[Outcome]) -> (Outcome, u64) {
        let outcome = self.rng.pick(choices);
        let duration = if outcome == Outcome::Timeout {
            1000
        } else {
            self.rng.range(5, 50)
        };
        (outcome, duration)
    }

    /// caller → gateway → dependency, one attempt each.
    fn healthy(&mut self, t0: u64, target: u64) {
        let g0 = t0 + self.net();
        let d0 = g0 + self.net();
        let d1 = d0 + self.rng.range(5, 120);
        let g1 = d1 + self.net();
        let c1 = g1 + self.net();
        self.push(Hop::Caller, 1, t0, c1, Outcome::Ok, target);
        self.push(Hop::Gateway, 1, g0, g1, Outcome::Ok, target);
        self.push(Hop::Dependency, 1, d0, d1, Outcome::Ok, target);
    }

    /// The caller retries up to 3 times and the gateway up to 3 times per caller attempt;
    /// each gateway attempt calls the dependency once. The dependency first succeeds on
    /// call 4 to 9 (or never), so the first caller attempt always spends its 3 gateway
    /// attempts and fails: two layers retry.
    fn nested_retry(&mut self, t0: u64, target: u64) {
        const FAILURES: [Outcome; 3] = [Outcome::Timeout, Outcome::Unavailable, Outcome::Error];
        let succeed_at = self.rng.range(4, 12); // > 9: never
        let (mut n_gw, mut n_dep) = (0, 0);
        let mut cs = t0;
        for c in 1..=3u64 {
            let mut gs = cs + self.net();
            let mut ge = gs;
            let mut ok = false;
            for g in 1..=3u64 {
                n_gw += 1;
                n_dep += 1;
                let ds = gs + self.net();
                let (outcome, duration) = if n_dep == succeed_at {
                    ok = true;
                    (Outcome::Ok, self.rng.range(5, 120))
                } else {
                    self.fail(&FAILURES)
                };
                let de = ds + duration;
                ge = de + self.net();
                let gw_outcome = if ok { Outcome::Ok } else { Outcome::Error };
                self.push(Hop::Gateway, n_gw, gs, ge, gw_outcome, target);
                self.push(Hop::Dependency, n_dep, ds, de, outcome, target);
                if ok {
                    break;
                }
                gs = ge + (100 << (g - 1)) + self.rng.range(0, 20); // gateway backoff
            }
            let ce = ge + self.net();
            let caller_outcome = if ok { Outcome::Ok } else { Outcome::Error };
            self.push(Hop::Caller, c, cs, ce, caller_outcome, target);
            if ok {
                break;
            }
            cs = ce + (500 << (c - 1)) + self.rng.range(0, 100); // caller backoff
        }
    }

    /// One gateway attempt calls 3 to 6 distinct targets in parallel.
    fn fan_out(&mut self, t0: u64, target: u64) {
        let g0 = t0 + self.net();
        let k = self.rng.range(3, 6);
        let mut g1 = g0;
        for i in 0..k {
            let t = (target + 37 * i) % TARGETS + 1; // distinct for i < 6
            let ds = g0 + self.net() + self.rng.range(0, 2);
            let (outcome, duration) = if self.rng.chance(0.9) {
                (Outcome::Ok, self.rng.range(5, 120))
            } else {
                self.fail(&[Outcome::Timeout, Outcome::Unavailable, Outcome::Error])
            };
            self.push(Hop::Dependency, 1, ds, ds + duration, outcome, t);
            g1 = g1.max(ds + duration);
        }
        g1 += self.net();
        let c1 = g1 + self.net();
        self.push(Hop::Caller, 1, t0, c1, Outcome::Ok, target);
        self.push(Hop::Gateway, 1, g0, g1, Outcome::Ok, target);
    }

    /// The caller publishes once; the queue delivers the message 2 or 3 times (after a
    /// visibility timeout) and each delivery calls the dependency once.
    fn redelivery(&mut self, t0: u64, target: u64) {
        let publish_end = t0 + self.net();
        self.push(Hop::Caller, 1, t0, publish_end, Outcome::Ok, target);
        let n = self.rng.range(2, 3);
        let mut cs = t0 + self.rng.range(5, 50);
        for i in 1..=n {
            let ds = cs + self.net();
            let (outcome, duration) = if i == n {
                (Outcome::Ok, self.rng.range(5, 120))
            } else {
                self.fail(&[Outcome::Timeout, Outcome::Error])
            };
            let de = ds + duration;
            let ce = de + self.net();
            let consumer_outcome = if i == n { Outcome::Ok } else { Outcome::Error };
            self.push(Hop::Consumer, i, cs, ce, consumer_outcome, target);
            self.push(Hop::Dependency, i, ds, de, outcome, target);
            cs = ce + self.rng.range(1000, 5000);
        }
    }

    /// The gateway times out after 250 ms and retries at once, while the dependency call
    /// it gave up on (≥ 300 ms) is still running.
    fn overlap(&mut self, t0: u64, target: u64) {
        const TIMEOUT_MS: u64 = 250;
        let n = self.rng.range(2, 3);
        let mut gs = t0 + self.net();
        let mut ge = gs;
        let caller = self.scratch.len();
        self.push(Hop::Caller, 1, t0, t0, Outcome::Ok, target); // finish set below
        for i in 1..=n {
            let ds = gs + self.net();
            if i < n {
                let de = ds + self.rng.range(TIMEOUT_MS + 50, 3000);
                let outcome = self.rng.pick(&[Outcome::Ok, Outcome::Timeout]);
                self.push(Hop::Dependency, i, ds, de, outcome, target);
                ge = gs + TIMEOUT_MS;
                self.push(Hop::Gateway, i, gs, ge, Outcome::Timeout, target);
                gs = ge + self.rng.range(0, 10);
            } else {
                let de = ds + self.rng.range(5, 120);
                ge = de + self.net();
                self.push(Hop::Dependency, i, ds, de, Outcome::Ok, target);
                self.push(Hop::Gateway, i, gs, ge, Outcome::Ok, target);
            }
        }
        self.scratch[caller].finish_ms = ge + self.net();
    }

    /// One caller and one gateway attempt; the dependency is called 4 or 5 times, over
    /// the budget of 3, each retry on a free over-budget slot.
    fn over_budget(&mut self, t0: u64, target: u64) {
        let g0 = t0 + self.net();
        let n = self.rng.range(4, 5);
        let mut ds = g0 + self.net();
        let mut de = ds;
        for k in 1..=n {
            if k > 1 {
                let desired = de + (50 << (k - 2)) + self.rng.range(0, 20);
                ds = self.take_slot(desired);
            }
            let (outcome, duration) = if k < n {
                self.fail(&[
                    Outcome::Unavailable,
                    Outcome::TooManyRequests,
                    Outcome::Error,
                ])
            } else {
                (Outcome::Ok, self.rng.range(5, 120))
            };
            de = ds + duration;
            self.push(Hop::Dependency, k, ds, de, outcome, target);
        }
        let g1 = de + self.net();
        let c1 = g1 + self.net();
        self.push(Hop::Caller, 1, t0, c1, Outcome::Ok, target);
        self.push(Hop::Gateway, 1, g0, g1, Outcome::Ok, target);
    }

    /// The start of the first free over-budget slot at or after `desired_ms`.
    fn take_slot(&mut self, desired_ms: u64) -> u64 {
        let mut slot = desired_ms.div_ceil(OVER_BUDGET_SLOT_MS);
        while self.slots.contains(&slot) {
            slot += 1;
        }
        self.slots.insert(slot);
        slot * OVER_BUDGET_SLOT_MS
    }

    /// A group of operations that fail at one instant and retry together on the next
    /// ticks of the burst schedule: every group instant holds at least
    /// `burst_group_min` operations.
    fn burst_group(&mut self, t0: u64, remaining: u64) -> io::Result<()> {
        let size = self
            .rng
            .range(self.plan.burst_group_min, self.plan.burst_group_max)
            .min(remaining);
        let first_retry = (t0 + BURST_MIN_BACKOFF_MS).div_ceil(BURST_PERIOD_MS) * BURST_PERIOD_MS;
        // How many fail again and retry a second time, on the following tick.
        let third = if self.rng.chance(0.5) {
            self.rng.range(self.plan.burst_group_min, size)
        } else {
            0
        };
        for i in 0..size {
            self.scratch.clear();
            let target = self.rng.range(1, TARGETS);
            let attempts = if i < third { 3 } else { 2 };
            for k in 1..=attempts {
                let cs = match k {
                    1 => t0,
                    _ => first_retry + (k - 2) * BURST_PERIOD_MS,
                };
                let (outcome, duration) = if k < attempts {
                    let outcome = self
                        .rng
                        .pick(&[Outcome::TooManyRequests, Outcome::Unavailable]);
                    (outcome, self.rng.range(5, 30))
                } else {
                    (Outcome::Ok, self.rng.range(5, 120))
                };
                let (gs, ds) = (cs + 1, cs + 2);
                let de = ds + duration;
                self.push(Hop::Caller, k, cs, de + 2, outcome, target);
                self.push(Hop::Gateway, k, gs, de + 1, outcome, target);
                self.push(Hop::Dependency, k, ds, de, outcome, target);
            }
            self.finish_op(Shape::Burst)?;
        }
        Ok(())
    }
}

/// Appends the decimal digits of `n`.
fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Appends `n` zero-padded to at least `width` digits.
fn push_padded(buf: &mut Vec<u8>, n: u64, width: usize) {
    let digits = if n == 0 { 1 } else { n.ilog10() as usize + 1 };
    buf.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits)));
    push_u64(buf, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    fn generate_to_vec(ops: u64, seed: u64, mix: &str) -> (Vec<u8>, Vec<u8>, Stats) {
        let opts = Options {
            ops,
            seed,
            mix: Mix::parse(&items(mix)).expect("valid mix"),
        };
        let (mut out, mut expected) = (Vec::new(), Vec::new());
        let stats = generate(&opts, &mut out, Some(&mut expected)).expect("in memory");
        (out, expected, stats)
    }

    /// (hop, attempt, start_ms) of every line, read back without a JSON parser.
    fn fields(out: &[u8]) -> Vec<(String, u64, u64)> {
        let text = std::str::from_utf8(out).expect("UTF-8");
        let value = |line: &str, key: &str| -> String {
            let from = line.find(&format!("\"{key}\":")).expect("key") + key.len() + 3;
            line[from..]
                .split([',', '}'])
                .next()
                .expect("value")
                .trim_matches('"')
                .to_string()
        };
        text.lines()
            .map(|l| {
                (
                    value(l, "hop"),
                    value(l, "attempt").parse().expect("attempt"),
                    value(l, "start_ms").parse().expect("start"),
                )
            })
            .collect()
    }

    #[test]
    fn a_mix_is_the_shapes_it_names() {
        let mix =
            Mix::parse(&items("over-budget=5,nested_retry=2,synchronized-burst=1")).expect("valid");
        assert_eq!(mix.weight(Shape::OverBudget), 5.0);
        assert_eq!(mix.weight(Shape::NestedRetry), 2.0);
        assert_eq!(mix.weight(Shape::Burst), 1.0);
        assert_eq!(mix.weight(Shape::Healthy), 0.0);
        assert_eq!(Mix::parse(&[]).expect("empty"), Mix::default());
    }

    #[test]
    fn mix_errors_name_the_item_and_the_fix() {
        let err = |s: &str| Mix::parse(&items(s)).unwrap_err().to_string();
        assert!(err("retry=3").contains("unknown shape \"retry\""));
        assert!(err("retry=3").contains("over-budget"));
        assert!(err("healthy").contains("SHAPE=WEIGHT"));
        assert!(err("healthy=-1").contains("≥ 0"));
        assert!(err("healthy=x").contains("healthy"));
        assert!(err("healthy=0,burst=0").contains("every weight is 0"));
    }

    #[test]
    fn rng_is_a_fixed_stream_and_ranges_are_inclusive() {
        // SplitMix64's published first output for seed 0.
        assert_eq!(Rng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut rng = Rng::new(7);
        let draws: Vec<u64> = (0..1000).map(|_| rng.range(1, 3)).collect();
        assert!(draws.iter().all(|d| (1..=3).contains(d)));
        assert!((1..=3).all(|v| draws.contains(&v)));
    }

    #[test]
    fn numbers_are_formatted_like_printf() {
        let mut b = Vec::new();
        push_padded(&mut b, 123, 6);
        b.push(b' ');
        push_padded(&mut b, 1_234_567, 6);
        b.push(b' ');
        push_u64(&mut b, 0);
        b.push(b' ');
        push_u64(&mut b, u64::MAX);
        assert_eq!(
            String::from_utf8(b).expect("ASCII"),
            "000123 1234567 0 18446744073709551615"
        );
    }

    #[test]
    fn the_default_mix_keeps_the_reference_pace_and_sizes_bursts_for_significance() {
        let plan = Plan::new(&Mix::default());
        assert_eq!(plan.mean_gap_ms, MEAN_GAP_MS);
        // Nested retries at the caller make ~4 per window; a burst needs far more.
        assert!((25..=45).contains(&plan.burst_group_min), "{plan:?}");
        assert_eq!(plan.burst_group_max, 2 * plan.burst_group_min);
        // Without nested retries nothing competes: a small group is already significant.
        let quiet = Plan::new(&Mix::parse(&items("healthy=70,burst=5")).expect("valid"));
        assert!(quiet.burst_group_min < plan.burst_group_min);
        assert!(quiet.burst_group_min >= DEFAULT_BURST_MIN_OPS as u64);
    }

    #[test]
    fn many_over_budget_operations_arrive_further_apart() {
        let plan = Plan::new(&Mix::parse(&items("over-budget=1")).expect("valid"));
        let expected = OVER_BUDGET_MEAN_RETRIES * OVER_BUDGET_SLOT_MS as f64 / 0.6;
        assert!((plan.mean_gap_ms - expected).abs() < 1e-9, "{plan:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_lines_are_sorted_by_start() {
        let mix =
            "healthy=70,nested-retry=8,fan-out=7,redelivery=5,overlap=5,burst=5,over-budget=5";
        let (a, ea, stats) = generate_to_vec(3000, 9, mix);
        let (b, eb, _) = generate_to_vec(3000, 9, mix);
        assert!(a == b && ea == eb);
        assert_ne!(a, generate_to_vec(3000, 10, mix).0);
        let lines = fields(&a);
        assert_eq!(lines.len() as u64, stats.lines);
        assert!(lines.windows(2).all(|w| w[0].2 <= w[1].2));
        assert_eq!(stats.per_shape.iter().sum::<u64>(), 3000);
        assert_eq!(String::from_utf8(ea).expect("UTF-8").lines().count(), 3001);
    }

    #[test]
    fn no_burst_window_at_the_dependency_holds_five_retries() {
        let (out, _, stats) = generate_to_vec(5000, 3, "healthy=10,over-budget=90");
        assert!(stats.per_shape[Shape::OverBudget.index()] > 4000);
        let retries: Vec<u64> = fields(&out)
            .into_iter()
            .filter(|(hop, attempt, _)| hop == "dependency" && *attempt > 1)
            .map(|(_, _, start)| start)
            .collect();
        let window = DEFAULT_BURST_WINDOW_MS as u64;
        for (i, &t) in retries.iter().enumerate() {
            let in_window = retries[i..].partition_point(|&s| s <= t + window);
            assert!(
                in_window < DEFAULT_BURST_MIN_OPS,
                "{in_window} retries from {t}"
            );
        }
    }

    #[test]
    fn burst_groups_fill_every_instant_they_use() {
        let (out, _, stats) = generate_to_vec(4000, 5, "healthy=50,nested-retry=10,burst=50");
        let plan =
            Plan::new(&Mix::parse(&items("healthy=50,nested-retry=10,burst=50")).expect("valid"));
        assert_eq!(stats.burst_group_min, plan.burst_group_min);
        let mut instants = std::collections::BTreeMap::<u64, u64>::new();
        for (hop, attempt, start) in fields(&out) {
            if hop == "caller" && attempt > 1 && start % BURST_PERIOD_MS == 0 {
                *instants.entry(start).or_default() += 1;
            }
        }
        assert!(!instants.is_empty());
        assert!(instants.values().all(|&n| n >= plan.burst_group_min));
    }
}
