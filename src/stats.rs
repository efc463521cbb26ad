//! Mergeable per-hop attempt statistics: what the summary's per-hop numbers (attempts,
//! originals, retries, redeliveries, retry success, latency percentiles) and the
//! attempts-over-time chart are computed from. Their size does not grow with the number of
//! attempts, and two of them merge exactly: each worker of the per-operation pass (and each
//! partition, and each partial written on another machine) fills its own [`AttemptStats`],
//! and merging them in any order gives, bit for bit, the statistics of the whole input
//! (the property test below splits attempts every which way to prove it).
//!
//! - Counts add.
//! - Latency goes into an HDR histogram (the `hdrhistogram` crate) of integer microseconds
//!   with [`LATENCY_SIGNIFICANT_DIGITS`] significant digits: every recorded value lands in a
//!   bucket at most 0.1 % wide, and two histograms add bucket by bucket, so a merge loses
//!   nothing more.
//! - Attempt starts go into a [`TimeHistogram`] of fine buckets 10^k ms wide, aligned to
//!   multiples of 10^k ms of absolute time, which the chart sums into its own coarser
//!   buckets (see [`AttemptStats::counts_over_time`]).
//!
//! Serialized as plain JSON (the non-empty buckets of each histogram), so a partial stays
//! readable by any tool.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::classify::Role;
use crate::model::{Attempt, Millis};

/// Significant decimal digits the latency sketch keeps: a recorded latency is off by at most
/// one part in a thousand (0.1 %), small enough for any percentile a report prints, and the
/// sketch of one hop stays a few kilobytes to a few hundred whatever the number of attempts.
pub const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// Largest latency recorded as itself, in µs (about 31 years): anything longer is a clock
/// error and is recorded as this, so that no input can make the histogram overflow.
const LATENCY_MAX_US: f64 = 1e15;

/// Most fine time buckets that the attempt starts may span before the time histogram's
/// resolution is coarsened tenfold. Why this number: the chart's step is at least
/// range ÷ 198 ms, and a histogram at resolution 10^k was coarsened only because the starts
/// spanned more than 20 000 buckets of 10^(k−1) ms, so range > 19 999 × 10^(k−1) and the
/// step exceeds 101 × 10^(k−1): a 1, 2 or 5 × 10^m with m ≥ k + 1, a whole number of fine
/// buckets. Dense, a histogram of 3 hops is then at most 20 000 × 10 counts (1.6 MB).
pub const FINE_BUCKETS_MAX: i64 = 20_000;

/// The finest resolution: 10^0 = 1 ms.
const FINEST_EXP: u32 = 0;

/// Coarsest resolution accepted when reading a serialized histogram (10^15 ms, 31 700
/// years): no real span of starts needs more.
const COARSEST_EXP: u32 = 15;

/// Counts of one hop's attempts; they add.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopCounts {
    /// First attempts of their line.
    pub originals: u64,
    /// Repeats in lines keyed by target.
    pub retries: u64,
    /// Repeats in lines keyed by message ID (queue hops).
    pub redeliveries: u64,
    /// Retries and redeliveries whose outcome was logged.
    pub repeats_known: u64,
    /// Of those, the ones that succeeded.
    pub repeats_succeeded: u64,
}

impl HopCounts {
    pub fn attempts(&self) -> u64 {
        self.originals + self.retries + self.redeliveries
    }

    fn add(&mut self, other: &HopCounts) {
        self.originals += other.originals;
        self.retries += other.retries;
        self.redeliveries += other.redeliveries;
        self.repeats_known += other.repeats_known;
        self.repeats_succeeded += other.repeats_succeeded;
    }
}

/// A mergeable sketch of attempt latencies (`finish − start`), in integer microseconds.
#[derive(Clone)]
pub struct LatencySketch(Histogram<u64>);

/// The non-empty buckets, not the histogram's thousands of counters.
impl std::fmt::Debug for LatencySketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.buckets()).finish()
    }
}

impl Default for LatencySketch {
    fn default() -> Self {
        // Auto-resizing: the range grows with the largest latency recorded.
        LatencySketch(Histogram::new(LATENCY_SIGNIFICANT_DIGITS).expect("3 digits are valid"))
    }
}

impl LatencySketch {
    /// Records one latency, rounded to the microsecond (negative ones count as 0).
    #[cfg(test)]
    pub fn record_ms(&mut self, ms: Millis) {
        self.record_us(LatencySketch::us_of(ms));
    }

    /// A latency as recorded: rounded to the microsecond, negative ones as 0.
    fn us_of(ms: Millis) -> u64 {
        (ms * 1000.0).round().clamp(0.0, LATENCY_MAX_US) as u64
    }

    /// Records one latency of [`LatencySketch::us_of`].
    fn record_us(&mut self, us: u64) {
        // Auto-resizing to any value up to LATENCY_MAX_US cannot fail on a 64-bit target.
        self.0
            .record(us)
            .expect("the histogram grows to any clamped latency");
    }

    /// Latencies recorded.
    pub fn recorded(&self) -> u64 {
        self.0.len()
    }

    /// The `p`th percentile in ms, by nearest rank: the latency of the ⌈p × n ÷ 100⌉-th
    /// smallest of the n recorded (rank computed in integers, so that p99 of 1000 latencies
    /// is exactly the 990th), reported as the highest value of its bucket: never below the
    /// true one, and at most 0.1 % above it. `None` when nothing was recorded.
    pub fn percentile_ms(&self, p: u64) -> Option<Millis> {
        let n = self.recorded();
        let rank = (p.min(100) * n).div_ceil(100).max(1);
        let mut seen = 0;
        self.buckets()
            .find(|&(_, count)| {
                seen += count;
                seen >= rank
            })
            .map(|(us, _)| us as f64 / 1000.0)
    }

    pub fn merge(&mut self, other: &LatencySketch) {
        self.0
            .add(&other.0)
            .expect("an auto-resizing histogram takes any other");
    }

    /// The non-empty buckets as (highest value of the bucket in µs, count), by value.
    fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
    }
}

impl PartialEq for LatencySketch {
    fn eq(&self, other: &Self) -> bool {
        self.buckets().eq(other.buckets())
    }
}

/// Serialized as the list of non-empty buckets, `[[µs, count], …]`: reading one back
/// records each count at its value, which lands in the same bucket.
impl Serialize for LatencySketch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.buckets())
    }
}

impl<'de> Deserialize<'de> for LatencySketch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(u64, u64)>::deserialize(deserializer)?;
        let mut sketch = LatencySketch::default();
        for (us, count) in pairs {
            if us as f64 > LATENCY_MAX_US {
                return Err(serde::de::Error::custom(format!(
                    "latency of {us} µs is beyond the largest one recorded ({LATENCY_MAX_US} µs)"
                )));
            }
            sketch
                .0
                .record_n(us, count)
                // The sketch's error type words it for a programmer: said here for a user.
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "latency of {us} µs ({count} times) does not fit the latency sketch: the partial was edited; make it again"
                    ))
                })?;
        }
        Ok(sketch)
    }
}

/// One hop's statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HopStats {
    #[serde(flatten)]
    pub counts: HopCounts,
    /// Latency of the finished attempts.
    pub latency_us: LatencySketch,
}

/// Counts per time bucket, for several series at once. Fine buckets are `10^exp` ms wide and
/// aligned to multiples of that width on the input's clock, so two histograms of the same
/// resolution add bucket by bucket and a coarser one is a sum of finer ones. The starts may
/// span at most [`FINE_BUCKETS_MAX`] buckets: beyond, the resolution is coarsened ×10. Its
/// resolution is therefore a function of the earliest and latest start alone (the finest
/// one at which they are at most that many buckets apart), whatever the order of the adds
/// or merges.
#[derive(Clone)]
pub struct TimeHistogram {
    exp: u32,
    series: usize,
    /// Bucket index of the window's first bucket.
    base: i64,
    /// The counts of a window of buckets around the data, bucket-major:
    /// `window[(bucket − base) × series + s]`. Slack on both sides keeps growth amortized.
    window: Vec<u64>,
    /// The first and last bucket with a count.
    span: Option<(i64, i64)>,
}

fn pow10(exp: u32) -> i64 {
    10i64.pow(exp)
}

/// Farthest whole ms from the epoch that a start is counted at (2^60 ms, 36 million years):
/// a start beyond it (a finite time such as 1e308 is a valid input) is counted as this.
/// No clock says so, and the spans of whole ms that the time histogram computes stay far
/// from overflowing (saturated at i64::MAX, a span from 0 wrapped around and the
/// histogram indexed out of its window: a panic).
const START_MS_LIMIT: i64 = 1 << 60;

/// The whole ms of a time (the millisecond it falls in), within [`START_MS_LIMIT`].
fn whole_ms(t_ms: Millis) -> i64 {
    (t_ms.floor() as i64).clamp(-START_MS_LIMIT, START_MS_LIMIT)
}

/// Adds buckets `lo..=hi` of window `from` (`series` counts a bucket, its first bucket's
/// index the pair's second item) into window `into`, each into the bucket `factor` times
/// coarser that holds it. At the same resolution the buckets lie in the same order in both
/// windows, and are added as one run: a spilled run merges a window of up to
/// [`FINE_BUCKETS_MAX`] buckets a series per partition, so adding them bucket by bucket,
/// with a division each, would cost in proportion to partitions × buckets.
fn add_window(
    (into, into_base): (&mut [u64], i64),
    (from, from_base): (&[u64], i64),
    (lo, hi): (i64, i64),
    factor: i64,
    series: usize,
) {
    if series == 0 {
        return;
    }
    if factor == 1 {
        let len = (hi - lo + 1) as usize * series;
        let at_from = (lo - from_base) as usize * series;
        let at_into = (lo - into_base) as usize * series;
        for (sum, &n) in into[at_into..at_into + len]
            .iter_mut()
            .zip(&from[at_from..at_from + len])
        {
            *sum += n;
        }
        return;
    }
    // Coarser: `factor` fine buckets in a row go into one bucket, the next coarse bucket
    // found by counting rather than by a division a bucket (a spilled run's partitions
    // each span fewer starts than all of them, and are often one resolution finer).
    let mut coarse = lo.div_euclid(factor);
    let mut next_coarse = (coarse + 1) * factor;
    let mut at_into = (coarse - into_base) as usize * series;
    let rows = from[(lo - from_base) as usize * series..(hi - from_base + 1) as usize * series]
        .chunks_exact(series);
    for (old, counts) in (lo..=hi).zip(rows) {
        if old == next_coarse {
            coarse += 1;
            next_coarse += factor;
            at_into += series;
        }
        for (sum, &n) in into[at_into..at_into + series].iter_mut().zip(counts) {
            *sum += n;
        }
    }
    debug_assert_eq!(coarse, hi.div_euclid(factor));
}

/// The fine bucket index of a time: its whole ms (exact), divided.
fn bucket_of(t_ms: Millis, exp: u32) -> i64 {
    whole_ms(t_ms).div_euclid(pow10(exp))
}

impl TimeHistogram {
    pub fn new(series: usize) -> TimeHistogram {
        TimeHistogram {
            exp: FINEST_EXP,
            series,
            base: 0,
            window: Vec::new(),
            span: None,
        }
    }

    /// Width of a fine bucket, in ms: a power of ten.
    pub fn resolution_ms(&self) -> i64 {
        pow10(self.exp)
    }

    fn buckets_in_window(&self) -> i64 {
        (self.window.len() / self.series.max(1)) as i64
    }

    /// Adds `n` to series `s` in the bucket of `t_ms`.
    pub fn add(&mut self, t_ms: Millis, s: usize, n: u64) {
        let mut b = bucket_of(t_ms, self.exp);
        if b < self.base || b >= self.base + self.buckets_in_window() {
            let (lo, hi) = self.span.map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b)));
            self.rebuild(self.exp, lo, hi);
            b = bucket_of(t_ms, self.exp);
        }
        self.window[(b - self.base) as usize * self.series + s] += n;
        self.span = Some(self.span.map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b))));
    }

    /// Adds 1 to series `s` in the bucket of each `(whole ms, s)` of `lists`: what adding
    /// them one by one gives, with the window laid out at most once.
    pub fn add_all(&mut self, lists: &[&[(i64, u32)]]) {
        let all = || lists.iter().flat_map(|l| l.iter());
        let Some((lo, hi)) = all().fold(None, |range, &(ms, _)| {
            Some(range.map_or((ms, ms), |(lo, hi): (i64, i64)| (lo.min(ms), hi.max(ms))))
        }) else {
            return;
        };
        let (b_lo, b_hi) = (
            lo.div_euclid(pow10(self.exp)),
            hi.div_euclid(pow10(self.exp)),
        );
        if b_lo < self.base || b_hi >= self.base + self.buckets_in_window() {
            let (lo, hi) = self
                .span
                .map_or((b_lo, b_hi), |(l, h)| (l.min(b_lo), h.max(b_hi)));
            self.rebuild(self.exp, lo, hi);
        }
        let width = pow10(self.exp);
        for &(ms, s) in all() {
            let b = ms.div_euclid(width);
            self.window[(b - self.base) as usize * self.series + s as usize] += 1;
        }
        let (lo, hi) = (lo.div_euclid(width), hi.div_euclid(width));
        self.span = Some(self.span.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))));
    }

    /// Re-lays the window to hold buckets `lo..=hi` of resolution `exp` (at least this
    /// one), coarsening further while they span more than [`FINE_BUCKETS_MAX`] buckets.
    fn rebuild(&mut self, exp: u32, lo: i64, hi: i64) {
        let factor = pow10(exp - self.exp);
        let (mut exp, mut lo, mut hi) = (exp, lo, hi);
        let mut factor = factor;
        while hi - lo + 1 > FINE_BUCKETS_MAX {
            exp += 1;
            factor *= 10;
            lo = lo.div_euclid(10);
            hi = hi.div_euclid(10);
        }
        let span = hi - lo + 1;
        let slack = ((FINE_BUCKETS_MAX - span) / 2).min(span / 2 + 32);
        let base = lo - slack;
        let mut window = vec![0u64; (span + 2 * slack) as usize * self.series];
        if let Some(old) = self.span {
            add_window(
                (&mut window, base),
                (&self.window, self.base),
                old,
                factor,
                self.series,
            );
        }
        self.span = self
            .span
            .map(|(l, h)| (l.div_euclid(factor), h.div_euclid(factor)));
        self.exp = exp;
        self.base = base;
        self.window = window;
    }

    /// Adds another histogram of the same series, at the coarser of the two resolutions.
    pub fn merge(&mut self, other: &TimeHistogram) {
        let Some((other_lo, other_hi)) = other.span else {
            return;
        };
        // The cheap cases first: a rebuild lays out and zeroes a whole window (up to
        // FINE_BUCKETS_MAX buckets per series), and most merges need none.
        if self.span.is_none() && self.exp <= other.exp && self.series == other.series {
            *self = other.clone();
            return;
        }
        if self.exp == other.exp && self.span.is_some() {
            let end = self.base + self.buckets_in_window();
            if other_lo >= self.base && other_hi < end {
                self.add_buckets(other, 1);
                return;
            }
        }
        let exp = self.exp.max(other.exp);
        let to_self = pow10(exp - self.exp);
        let to_other = pow10(exp - other.exp);
        let (mut lo, mut hi) = (other_lo.div_euclid(to_other), other_hi.div_euclid(to_other));
        if let Some((l, h)) = self.span {
            lo = lo.min(l.div_euclid(to_self));
            hi = hi.max(h.div_euclid(to_self));
        }
        self.rebuild(exp, lo, hi);
        self.add_buckets(other, pow10(self.exp - other.exp));
    }

    /// Adds `other`'s counts, its buckets `factor` times finer than this one's, into a
    /// window that holds them all.
    fn add_buckets(&mut self, other: &TimeHistogram, factor: i64) {
        let Some((other_lo, other_hi)) = other.span else {
            return;
        };
        add_window(
            (&mut self.window, self.base),
            (&other.window, other.base),
            (other_lo, other_hi),
            factor,
            self.series,
        );
        let lo = other_lo.div_euclid(factor);
        let hi = other_hi.div_euclid(factor);
        self.span = Some(self.span.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))));
    }

    /// The counts of bucket `b`, one per series.
    fn bucket(&self, b: i64) -> &[u64] {
        let at = (b - self.base) as usize * self.series;
        &self.window[at..at + self.series]
    }

    /// The non-empty buckets: (index, counts per series), in time order.
    fn non_empty(&self) -> impl Iterator<Item = (i64, &[u64])> + '_ {
        let (lo, hi) = self.span.unwrap_or((0, -1));
        (lo..=hi)
            .map(|b| (b, self.bucket(b)))
            .filter(|(_, c)| c.iter().any(|&n| n > 0))
    }
}

/// The resolution and the non-empty buckets, not the window.
impl std::fmt::Debug for TimeHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeHistogram")
            .field("resolution_ms", &self.resolution_ms())
            .field("buckets", &self.non_empty().collect::<Vec<_>>())
            .finish()
    }
}

impl PartialEq for TimeHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.series == other.series
            && self.span.is_none() == other.span.is_none()
            && (self.span.is_none() || self.exp == other.exp)
            && self.non_empty().eq(other.non_empty())
    }
}

/// Which series of the time histogram counts what: 0 the operations started, then per hop
/// its originals, retries and redeliveries (in [`Role`] order).
fn series_of(hop: u16, role: Role) -> usize {
    1 + hop as usize * Role::ALL.len() + role as usize
}

fn series_for(hops: usize) -> usize {
    1 + hops * Role::ALL.len()
}

/// The mergeable statistics of a set of attempts, per hop.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptStats {
    hops: Vec<HopStats>,
    /// The whole ms of the earliest and latest attempt start (integers, so that they
    /// survive any JSON reader exactly).
    start_range: Option<(i64, i64)>,
    over_time: TimeHistogram,
}

/// What [`AttemptStats::counts_over_time`] returns: counts per chart bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct CountsOverTime {
    /// Index of the first bucket: it starts at `first_bucket × step` ms.
    pub first_bucket: i64,
    /// Logical operations started, per bucket.
    pub operations_started: Vec<u64>,
    /// Per hop, per role (in [`Role`] order), attempts started per bucket.
    pub hops: Vec<[Vec<u64>; 3]>,
}

impl AttemptStats {
    pub fn new(hops: usize) -> AttemptStats {
        AttemptStats {
            hops: vec![HopStats::default(); hops],
            start_range: None,
            over_time: TimeHistogram::new(series_for(hops)),
        }
    }

    /// Counts one attempt, which had this role in its line: one at a time, the reference
    /// that [`StatsBuilder`], which the passes use, is tested against.
    #[cfg(test)]
    pub fn add(&mut self, a: &Attempt, role: Role) {
        if let Some(us) = self.count(a, role) {
            self.hops[a.hop as usize].latency_us.record_us(us);
        }
        self.over_time.add(a.start_ms, series_of(a.hop, role), 1);
    }

    /// Counts one attempt in everything but its latency, which it returns, and the time
    /// histogram: the caller records those (see [`StatsBuilder`]).
    fn count(&mut self, a: &Attempt, role: Role) -> Option<u64> {
        let hop = &mut self.hops[a.hop as usize];
        let counts = &mut hop.counts;
        match role {
            Role::Original => counts.originals += 1,
            Role::Retry => counts.retries += 1,
            Role::Redelivery => counts.redeliveries += 1,
        }
        if role != Role::Original {
            if let Some(outcome) = a.outcome {
                counts.repeats_known += 1;
                counts.repeats_succeeded += u64::from(outcome.is_success());
            }
        }
        let ms = whole_ms(a.start_ms);
        self.start_range = Some(match self.start_range {
            None => (ms, ms),
            Some((first, last)) => (first.min(ms), last.max(ms)),
        });
        a.duration_ms().map(LatencySketch::us_of)
    }

    /// Counts a logical operation whose first attempt started at `ms` (one of the starts
    /// given to [`AttemptStats::add`]).
    #[cfg(test)]
    pub fn add_operation_start(&mut self, ms: Millis) {
        self.over_time.add(ms, 0, 1);
    }

    /// Adds the statistics of other attempts (of the same hops): the result is what one
    /// [`AttemptStats`] fed all of them would hold.
    pub fn merge(&mut self, other: &AttemptStats) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.hops.len() == other.hops.len(),
            "attempt statistics of {} hops cannot merge with statistics of {}",
            self.hops.len(),
            other.hops.len()
        );
        for (a, b) in self.hops.iter_mut().zip(&other.hops) {
            a.counts.add(&b.counts);
            a.latency_us.merge(&b.latency_us);
        }
        self.start_range = match (self.start_range, other.start_range) {
            (None, r) | (r, None) => r,
            (Some((f1, l1)), Some((f2, l2))) => Some((f1.min(f2), l1.max(l2))),
        };
        self.over_time.merge(&other.over_time);
        Ok(())
    }

    /// Number of hops.
    pub fn hop_count(&self) -> usize {
        self.hops.len()
    }

    pub fn hop(&self, h: usize) -> &HopStats {
        &self.hops[h]
    }

    /// Attempts at all hops.
    pub fn attempts(&self) -> u64 {
        self.hops.iter().map(|h| h.counts.attempts()).sum()
    }

    /// The whole ms of the earliest and latest attempt start; `None` without attempts.
    pub fn start_range(&self) -> Option<(i64, i64)> {
        self.start_range
    }

    /// Width of the finest buckets the counts over time can be summed into, in ms.
    pub fn time_resolution_ms(&self) -> i64 {
        self.over_time.resolution_ms()
    }

    /// Counts per bucket of `step_ms` (a multiple of [`AttemptStats::time_resolution_ms`]),
    /// buckets aligned to multiples of `step_ms`: bucket `i` covers
    /// `[(first_bucket + i) × step, (first_bucket + i + 1) × step)`, and each is the exact
    /// sum of the fine buckets inside it. `None` without attempts, or when `step_ms` is not
    /// such a multiple.
    pub fn counts_over_time(&self, step_ms: i64) -> Option<CountsOverTime> {
        let (first, last) = self.start_range?;
        let unit = self.over_time.resolution_ms();
        if step_ms <= 0 || step_ms % unit != 0 {
            return None;
        }
        let per = step_ms / unit;
        let first_bucket = first.div_euclid(step_ms);
        let buckets = (last.div_euclid(step_ms) - first_bucket + 1) as usize;
        let mut operations_started = vec![0u64; buckets];
        let mut hops: Vec<[Vec<u64>; 3]> = (0..self.hops.len())
            .map(|_| std::array::from_fn(|_| vec![0u64; buckets]))
            .collect();
        for (b, counts) in self.over_time.non_empty() {
            let i = (b.div_euclid(per) - first_bucket) as usize;
            operations_started[i] += counts[0];
            for (h, series) in hops.iter_mut().enumerate() {
                for role in Role::ALL {
                    series[role as usize][i] += counts[series_of(h as u16, role)];
                }
            }
        }
        Some(CountsOverTime {
            first_bucket,
            operations_started,
            hops,
        })
    }
}

/// [`AttemptStats`] filled by one worker of the per-operation pass. Counts and latencies
/// go in at once; the attempt starts wait in a list until every worker is done and are
/// then counted into one time histogram laid out once ([`StatsBuilder::finish`]). Why:
/// each worker sees a slice of the whole span of starts, so a histogram per worker would
/// be laid out again each time its starts outgrew it, and again at the merge, allocating
/// and zeroing memory in proportion to the layouts rather than to the starts. The list
/// costs 16 bytes a start, freed with the pass.
///
/// Latencies likewise wait in a list per hop and go into one sketch per hop at the end:
/// a sketch per worker and hop would grow (its counts copied) each time a larger latency
/// came, and be merged counter by counter, for a few thousand latencies each.
pub struct StatsBuilder {
    stats: AttemptStats,
    /// The whole ms and the series of each start counted, in no particular order.
    starts: Vec<(i64, u32)>,
    /// Per hop, the latencies counted ([`LatencySketch::us_of`]), in no particular order.
    latencies_us: Vec<Vec<u64>>,
}

impl StatsBuilder {
    pub fn new(hops: usize) -> StatsBuilder {
        StatsBuilder {
            stats: AttemptStats::new(hops),
            starts: Vec::new(),
            latencies_us: vec![Vec::new(); hops],
        }
    }

    /// Counts one attempt, which had this role in its line.
    pub fn add(&mut self, a: &Attempt, role: Role) {
        if let Some(us) = self.stats.count(a, role) {
            self.latencies_us[a.hop as usize].push(us);
        }
        self.starts
            .push((whole_ms(a.start_ms), series_of(a.hop, role) as u32));
    }

    /// Counts a logical operation whose first attempt started at `ms` (one of the starts
    /// given to [`StatsBuilder::add`]).
    pub fn add_operation_start(&mut self, ms: Millis) {
        self.starts.push((whole_ms(ms), 0));
    }

    /// The statistics of all the workers' attempts: what one [`AttemptStats`] fed all of
    /// them would hold.
    pub fn finish(builders: Vec<StatsBuilder>, hops: usize) -> AttemptStats {
        let mut out = AttemptStats::new(hops);
        for b in &builders {
            out.merge(&b.stats)
                .expect("every worker counts the same hops");
        }
        let starts: Vec<&[(i64, u32)]> = builders.iter().map(|b| b.starts.as_slice()).collect();
        out.over_time.add_all(&starts);
        for (h, hop) in out.hops.iter_mut().enumerate() {
            for us in builders.iter().flat_map(|b| &b.latencies_us[h]) {
                hop.latency_us.record_us(*us);
            }
        }
        out
    }
}

/// The JSON form of [`AttemptStats`]: plain numbers and lists, checked when read.
#[derive(Serialize, Deserialize)]
struct StatsForm {
    /// One per hop, in hop order.
    hops: Vec<HopStats>,
    /// Whole ms of the earliest and latest attempt start; null without attempts.
    start_range_ms: Option<(i64, i64)>,
    /// Width of the time buckets below, in ms: a power of ten.
    time_bucket_ms: i64,
    /// The non-empty time buckets: `[index, [operations started, then per hop originals,
    /// retries, redeliveries]]`, bucket `index` covering `[index × time_bucket_ms,
    /// (index + 1) × time_bucket_ms)`.
    time_buckets: Vec<(i64, Vec<u64>)>,
}

impl Serialize for AttemptStats {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StatsForm {
            hops: self.hops.clone(),
            start_range_ms: self.start_range,
            time_bucket_ms: self.over_time.resolution_ms(),
            time_buckets: self
                .over_time
                .non_empty()
                .map(|(b, c)| (b, c.to_vec()))
                .collect(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AttemptStats {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = StatsForm::deserialize(deserializer)?;
        AttemptStats::from_form(form).map_err(serde::de::Error::custom)
    }
}

impl AttemptStats {
    /// Rebuilds statistics from their JSON form, refusing any that one run could not have
    /// written: the time buckets must add up to the hop counts, at the resolution the
    /// starts imply.
    fn from_form(form: StatsForm) -> Result<AttemptStats, String> {
        let mut stats = AttemptStats::new(form.hops.len());
        let series = series_for(form.hops.len());
        let exp = (FINEST_EXP..=COARSEST_EXP)
            .find(|&e| pow10(e) == form.time_bucket_ms)
            .ok_or_else(|| {
                format!(
                    "time_bucket_ms {} is not a power of ten from 1 to 10^{COARSEST_EXP}",
                    form.time_bucket_ms
                )
            })?;
        if let Some((first, last)) = form.start_range_ms {
            if first > last {
                return Err(format!("start_range_ms [{first}, {last}] is not a range"));
            }
            let expected = expected_exp(first, last);
            if expected != exp {
                return Err(format!(
                    "time_bucket_ms {} does not fit starts from {first} to {last} ms (expected {})",
                    form.time_bucket_ms,
                    pow10(expected)
                ));
            }
        }
        stats.start_range = form.start_range_ms;
        stats.over_time.exp = exp;
        let mut sums = vec![0u64; series];
        let mut previous: Option<i64> = None;
        for (b, counts) in &form.time_buckets {
            if counts.len() != series {
                return Err(format!(
                    "time bucket {b} has {} counts, expected {series} (1 + 3 per hop)",
                    counts.len()
                ));
            }
            if previous.is_some_and(|p| p >= *b) {
                return Err(format!("time bucket {b} is out of order"));
            }
            previous = Some(*b);
            let inside = form.start_range_ms.is_some_and(|(first, last)| {
                first.div_euclid(pow10(exp)) <= *b && *b <= last.div_euclid(pow10(exp))
            });
            if !inside {
                return Err(format!(
                    "time bucket {b} lies outside the starts of start_range_ms"
                ));
            }
            for (s, &n) in counts.iter().enumerate() {
                sums[s] = sums[s].saturating_add(n);
                if n > 0 {
                    stats.over_time.add((*b * pow10(exp)) as Millis, s, n);
                }
            }
        }
        for (h, hop) in form.hops.iter().enumerate() {
            for role in Role::ALL {
                let counted = match role {
                    Role::Original => hop.counts.originals,
                    Role::Retry => hop.counts.retries,
                    Role::Redelivery => hop.counts.redeliveries,
                };
                let bucketed = sums[series_of(h as u16, role)];
                if counted != bucketed {
                    return Err(format!(
                        "hop {h}: {counted} {} counted but {bucketed} in the time buckets",
                        role.name()
                    ));
                }
            }
            if hop.counts.repeats_succeeded > hop.counts.repeats_known
                || hop.counts.repeats_known > hop.counts.retries + hop.counts.redeliveries
            {
                return Err(format!(
                    "hop {h}: more repeats with an outcome than repeats"
                ));
            }
            if hop.latency_us.recorded() > hop.counts.attempts() {
                return Err(format!("hop {h}: more latencies than attempts"));
            }
        }
        if (stats.start_range.is_none()) != (sums.iter().all(|&n| n == 0)) {
            return Err("start_range_ms and the time buckets disagree about any attempt".into());
        }
        stats.hops = form.hops;
        Ok(stats)
    }
}

/// The resolution a time histogram of starts from whole ms `first` to `last` has: the
/// finest at which they are at most [`FINE_BUCKETS_MAX`] buckets apart.
fn expected_exp(first: i64, last: i64) -> u32 {
    (FINEST_EXP..=COARSEST_EXP)
        .find(|&e| last.div_euclid(pow10(e)) - first.div_euclid(pow10(e)) < FINE_BUCKETS_MAX)
        .unwrap_or(COARSEST_EXP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::tests_support::attempt;
    use crate::model::Outcome;
    use proptest::prelude::*;

    fn stats_of(items: &[(Attempt, Role)], hops: usize) -> AttemptStats {
        let mut s = AttemptStats::new(hops);
        for (a, role) in items {
            s.add(a, *role);
            if *role == Role::Original && a.hop == 0 {
                s.add_operation_start(a.start_ms);
            }
        }
        s
    }

    fn item(
        hop: u16,
        start: f64,
        duration: Option<f64>,
        role: Role,
        ok: Option<bool>,
    ) -> (Attempt, Role) {
        let mut a = attempt(hop, start, start + duration.unwrap_or(0.0));
        a.finish_ms = duration.map(|d| start + d);
        a.outcome = ok.map(|ok| if ok { Outcome::Ok } else { Outcome::Error });
        (a, role)
    }

    #[test]
    fn counts_add_and_retry_success_counts_only_repeats_with_an_outcome() {
        let items = [
            item(0, 0.0, Some(10.0), Role::Original, Some(false)),
            item(0, 20.0, Some(10.0), Role::Retry, Some(true)),
            item(0, 40.0, None, Role::Retry, None),
            item(1, 5.0, Some(1.0), Role::Redelivery, Some(false)),
        ];
        let s = stats_of(&items, 2);
        assert_eq!(s.attempts(), 4);
        assert_eq!(
            s.hop(0).counts,
            HopCounts {
                originals: 1,
                retries: 2,
                redeliveries: 0,
                repeats_known: 1,
                repeats_succeeded: 1,
            }
        );
        assert_eq!(s.hop(1).counts.redeliveries, 1);
        assert_eq!(s.hop(1).counts.repeats_known, 1);
        assert_eq!(s.hop(1).counts.repeats_succeeded, 0);
        // The unfinished retry has no latency.
        assert_eq!(s.hop(0).latency_us.recorded(), 2);
        assert_eq!(s.start_range(), Some((0, 40)));
    }

    #[test]
    fn percentiles_are_nearest_rank_within_a_thousandth_and_never_below() {
        let mut sketch = LatencySketch::default();
        for ms in 1..=1000 {
            sketch.record_ms(ms as f64);
        }
        for (p, exact) in [(50, 500.0), (95, 950.0), (99, 990.0), (100, 1000.0)] {
            let got = sketch.percentile_ms(p).unwrap();
            assert!(
                got >= exact && got <= exact * 1.001,
                "p{p}: {got} vs {exact}"
            );
        }
        // The highest value of the bucket: 100 ms falls in [99.968, 100.031] ms.
        let mut one = LatencySketch::default();
        one.record_ms(100.0);
        assert_eq!(one.percentile_ms(50), Some(100.031));
        // Below 2.048 ms every microsecond has its own bucket: exact.
        let mut small = LatencySketch::default();
        small.record_ms(1.234);
        assert_eq!(small.percentile_ms(50), Some(1.234));
        assert_eq!(LatencySketch::default().percentile_ms(50), None);
    }

    #[test]
    fn fine_buckets_coarsen_tenfold_past_the_limit_and_stay_aligned() {
        let mut h = TimeHistogram::new(1);
        h.add(1_000.0, 0, 1);
        h.add(1_000.0 + (FINE_BUCKETS_MAX - 1) as f64, 0, 1);
        assert_eq!(h.resolution_ms(), 1, "exactly the limit still fits");
        h.add(1_000.0 + FINE_BUCKETS_MAX as f64, 0, 1);
        assert_eq!(h.resolution_ms(), 10);
        assert_eq!(
            h.non_empty().map(|(b, c)| (b, c[0])).collect::<Vec<_>>(),
            vec![(100, 1), (2099, 1), (2100, 1)]
        );
        // A start far before the others, for a wide span: coarsened until it fits.
        h.add(-5e9, 0, 1);
        assert_eq!(h.resolution_ms(), 1_000_000);
        assert_eq!(h.non_empty().map(|(_, c)| c[0]).sum::<u64>(), 4);
    }

    #[test]
    fn starts_at_the_ends_of_the_float_range_are_counted_without_overflow() {
        for starts in [
            [0.0, 1e308],
            [1e308, 0.0],
            [-1e308, 1e308],
            [f64::MAX, f64::MIN],
        ] {
            let mut h = TimeHistogram::new(1);
            for t in starts {
                h.add(t, 0, 1);
            }
            assert_eq!(
                h.non_empty().map(|(_, c)| c[0]).sum::<u64>(),
                2,
                "{starts:?}"
            );
            let mut all = TimeHistogram::new(1);
            let listed: Vec<(i64, u32)> = starts.iter().map(|&t| (whole_ms(t), 0)).collect();
            all.add_all(&[&listed]);
            assert_eq!(all, h, "{starts:?}");
        }
    }

    #[test]
    fn chart_buckets_are_sums_of_fine_buckets_aligned_to_the_step() {
        let items: Vec<_> = [3.0, 7.5, 12.0, 19.999, 20.0, 41.0]
            .into_iter()
            .map(|t| item(0, t, Some(1.0), Role::Original, None))
            .collect();
        let s = stats_of(&items, 1);
        let c = s.counts_over_time(10).unwrap();
        assert_eq!(c.first_bucket, 0);
        assert_eq!(c.hops[0][Role::Original as usize], vec![2, 2, 1, 0, 1]);
        assert_eq!(c.operations_started, vec![2, 2, 1, 0, 1]);
        assert_eq!(s.counts_over_time(3), s.counts_over_time(3));
        assert!(s.counts_over_time(0).is_none());
    }

    #[test]
    fn reading_refuses_statistics_one_run_could_not_have_written() {
        let items = [item(0, 5.0, Some(1.0), Role::Original, None)];
        let good = serde_json::to_value(stats_of(&items, 1)).unwrap();
        let read: AttemptStats = serde_json::from_value(good.clone()).unwrap();
        assert_eq!(read, stats_of(&items, 1));
        let broken = |path: &str, value: serde_json::Value| {
            let mut v = good.clone();
            *v.pointer_mut(path).unwrap() = value;
            serde_json::from_value::<AttemptStats>(v)
                .unwrap_err()
                .to_string()
        };
        assert!(broken("/time_bucket_ms", 3.into()).contains("power of ten"));
        assert!(broken("/time_bucket_ms", 10.into()).contains("does not fit"));
        assert!(broken("/hops/0/originals", 2.into()).contains("counted but 1"));
        assert!(broken("/time_buckets/0/0", 9.into()).contains("outside"));
        assert!(broken("/time_buckets/0/1", serde_json::json!([1])).contains("expected 4"));
    }

    #[test]
    fn merging_statistics_of_different_hops_is_refused() {
        let mut a = AttemptStats::new(2);
        assert!(a.merge(&AttemptStats::new(3)).is_err());
    }

    fn role_of(n: u8) -> Role {
        Role::ALL[n as usize % 3]
    }

    proptest! {
        /// Merging the statistics of the parts of any split, in any order, gives the
        /// statistics of the whole; so does writing and reading each part as JSON.
        #[test]
        fn merging_the_stats_of_any_split_equals_the_stats_of_the_whole(
            raw in prop::collection::vec(
                (0u16..3, 0u8..3, -1e3f64..1e3, prop::option::of(0f64..5e4), prop::option::of(any::<bool>())),
                1..300,
            ),
            scale in prop::sample::select(vec![1.0, 1e2, 1e5, 1e9]),
            origin in prop::sample::select(vec![0.0, 1.7e12]),
            cuts in prop::collection::vec(0usize..300, 0..6),
            reverse in any::<bool>(),
        ) {
            let items: Vec<(Attempt, Role)> = raw
                .iter()
                .map(|&(hop, r, t, d, ok)| item(hop, origin + t * scale, d, role_of(r), ok))
                .collect();
            let whole = stats_of(&items, 3);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (items.len() + 1)).collect();
            cuts.push(0);
            cuts.push(items.len());
            cuts.sort_unstable();
            let mut parts: Vec<AttemptStats> = cuts
                .windows(2)
                .map(|w| stats_of(&items[w[0]..w[1]], 3))
                .map(|p| serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap())
                .collect();
            if reverse {
                parts.reverse();
            }
            let mut merged = AttemptStats::new(3);
            for p in &parts {
                merged.merge(p).unwrap();
            }
            prop_assert_eq!(&merged, &whole);
            prop_assert_eq!(
                serde_json::to_string(&merged).unwrap(),
                serde_json::to_string(&whole).unwrap()
            );
            // Workers that fill builders, one per part, give the same statistics.
            let builders = cuts
                .windows(2)
                .map(|w| {
                    let mut b = StatsBuilder::new(3);
                    for (a, role) in &items[w[0]..w[1]] {
                        b.add(a, *role);
                        if *role == Role::Original && a.hop == 0 {
                            b.add_operation_start(a.start_ms);
                        }
                    }
                    b
                })
                .collect();
            let built = StatsBuilder::finish(builders, 3);
            prop_assert_eq!(&built, &whole);
            prop_assert_eq!(
                serde_json::to_string(&built).unwrap(),
                serde_json::to_string(&whole).unwrap()
            );
            // The chart of any step that the resolution divides is the plain bucketing of
            // the starts by multiples of the step.
            let step = whole.time_resolution_ms() * 20;
            let chart = whole.counts_over_time(step).unwrap();
            let first = items.iter().map(|(a, _)| a.start_ms).fold(f64::INFINITY, f64::min);
            let first_bucket = (first.floor() as i64).div_euclid(step);
            prop_assert_eq!(chart.first_bucket, first_bucket);
            for (h, series) in chart.hops.iter().enumerate() {
                for role in Role::ALL {
                    let mut expected = vec![0u64; series[0].len()];
                    for (a, r) in &items {
                        if a.hop as usize == h && *r == role {
                            expected[((a.start_ms.floor() as i64).div_euclid(step) - first_bucket) as usize] += 1;
                        }
                    }
                    prop_assert_eq!(&series[role as usize], &expected);
                }
            }
        }
    }
}
