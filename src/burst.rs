//! Synchronized bursts (SPEC §3): across all operations, clusters of retries at one hop that
//! start within one narrow window, from many operations, far more than the surrounding
//! retry rate explains. Aligned failures retried on one fixed schedule make them; jittered
//! retries spread out and do not.

use crate::model::Millis;
use crate::rules::BurstParams;

/// Neighbouring windows on each side whose retries set the expected rate (SPEC §3).
pub const NEIGHBOUR_WINDOWS: f64 = 10.0;

/// A window's count must be this unlikely under the neighbours' Poisson rate (SPEC §3).
pub const BURST_P_VALUE: f64 = 1e-6;

/// One retry start, with the operation it belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPoint {
    pub start_ms: Millis,
    pub op: u32,
    pub delay_ms: Option<Millis>,
}

/// A detected burst at one hop.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    pub hop: u16,
    pub start_ms: Millis,
    pub width_ms: Millis,
    pub retries: usize,
    /// Distinct operations, sorted.
    pub ops: Vec<u32>,
    /// Retries the neighbouring windows' rate predicts for a window.
    pub expected_retries: f64,
    pub p_value: f64,
    /// Smallest and largest backoff delay before the burst's retries (equal: no jitter).
    pub delay_min_ms: Option<Millis>,
    pub delay_max_ms: Option<Millis>,
}

/// Finds the bursts at one hop. `points` must be sorted by (start, op).
///
/// A window `[t, t + W]` starting at a retry is a candidate when it holds retries of at
/// least `min_ops` operations and its count is below [`BURST_P_VALUE`] under the Poisson
/// rate of the neighbouring windows. The burst is then narrowed to the sub-window of that
/// candidate that is least likely by chance (expected count proportional to its width), so
/// a stray retry that happens to fall near an aligned cluster is not counted in it.
pub fn find_bursts(hop: u16, points: &[RetryPoint], params: BurstParams) -> Vec<Burst> {
    let w = params.window_ms;
    let times: Vec<Millis> = points.iter().map(|p| p.start_ms).collect();
    let mut bursts = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let t0 = times[i];
        let end = times.partition_point(|&t| t <= t0 + w);
        if end - i < params.min_ops {
            i += 1;
            continue;
        }
        let rate_per_ms = neighbour_rate_per_ms(&times, t0, w);
        let ln_p = ln_poisson_tail((end - i) as u64, rate_per_ms * w);
        if ln_p >= BURST_P_VALUE.ln() {
            i += 1;
            continue;
        }
        let (from, to, ln_p) = tightest_cluster(&times[i..end], rate_per_ms);
        let (from, to, ln_p) = match distinct_ops(&points[i + from..i + to]) >= params.min_ops {
            true => (i + from, i + to, ln_p),
            false => (i, end, ln_poisson_tail((end - i) as u64, rate_per_ms * w)),
        };
        let ops = {
            let mut ops: Vec<u32> = points[from..to].iter().map(|p| p.op).collect();
            ops.sort_unstable();
            ops.dedup();
            ops
        };
        if ops.len() < params.min_ops {
            i += 1;
            continue;
        }
        let delays = points[from..to].iter().filter_map(|p| p.delay_ms);
        bursts.push(Burst {
            hop,
            start_ms: times[from],
            width_ms: times[to - 1] - times[from],
            retries: to - from,
            ops,
            expected_retries: rate_per_ms * w,
            p_value: ln_p.exp(),
            delay_min_ms: delays.clone().reduce(Millis::min),
            delay_max_ms: delays.reduce(Millis::max),
        });
        i = to;
    }
    bursts
}

/// Retries per ms around a window starting at `t0`: the busier of the ten windows before
/// and the ten after, so the leading or trailing edge of a jittered wave (quiet on one
/// side, busy on the other) is not mistaken for a burst. At least one retry is assumed in
/// the neighbourhood, so an isolated handful of retries is not infinitely unlikely.
fn neighbour_rate_per_ms(times: &[Millis], t0: Millis, w: Millis) -> f64 {
    let span = NEIGHBOUR_WINDOWS * w;
    let before = times.partition_point(|&t| t < t0) - times.partition_point(|&t| t < t0 - span);
    let after =
        times.partition_point(|&t| t <= t0 + w + span) - times.partition_point(|&t| t <= t0 + w);
    before.max(after).max(1) as f64 / span
}

/// Resolution of the clocks in the logs: a sub-window narrower than this is this wide.
const TIME_RESOLUTION_MS: Millis = 1.0;

/// The sub-window `[from, to)` of `times` (sorted) least likely under `rate_per_ms`, with
/// its log p-value. Ties prefer more retries, then the narrower window.
fn tightest_cluster(times: &[Millis], rate_per_ms: f64) -> (usize, usize, f64) {
    let starts: Vec<usize> = (0..times.len())
        .filter(|&a| a == 0 || times[a] != times[a - 1])
        .collect();
    let mut best = (0, times.len(), f64::INFINITY);
    for &a in &starts {
        for b in a + 1..=times.len() {
            if b < times.len() && times[b] == times[b - 1] {
                continue; // take all retries at one instant together
            }
            let width = (times[b - 1] - times[a]).max(TIME_RESOLUTION_MS);
            let ln_p = ln_poisson_tail((b - a) as u64, rate_per_ms * width);
            let better = ln_p < best.2
                || (ln_p == best.2
                    && (b - a > best.1 - best.0
                        || (b - a == best.1 - best.0
                            && times[b - 1] - times[a] < times[best.1 - 1] - times[best.0])));
            if better {
                best = (a, b, ln_p);
            }
        }
    }
    best
}

fn distinct_ops(points: &[RetryPoint]) -> usize {
    let mut ops: Vec<u32> = points.iter().map(|p| p.op).collect();
    ops.sort_unstable();
    ops.dedup();
    ops.len()
}

/// P(X ≥ k) for X ~ Poisson(λ).
#[cfg(test)]
fn poisson_tail(k: u64, lambda: f64) -> f64 {
    ln_poisson_tail(k, lambda).exp()
}

/// ln P(X ≥ k) for X ~ Poisson(λ), in log space so that very unlikely counts compare
/// correctly instead of all underflowing to zero.
pub fn ln_poisson_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    if lambda <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_pmf = |n: u64| -lambda + n as f64 * lambda.ln() - ln_factorial(n);
    if (k as f64) <= lambda {
        // In the bulk: 1 − P(X < k) is accurate enough and the sum is short.
        let below: f64 = (0..k).map(|n| ln_pmf(n).exp()).sum();
        return (1.0 - below).max(f64::MIN_POSITIVE).ln();
    }
    // Far tail: pmf(k) · (1 + λ/(k+1) + λ²/((k+1)(k+2)) + …), a series that shrinks fast.
    let (mut sum, mut term, mut n) = (1.0f64, 1.0f64, k);
    loop {
        n += 1;
        term *= lambda / n as f64;
        sum += term;
        if term < sum * 1e-12 {
            break;
        }
    }
    ln_pmf(k) + sum.ln()
}

fn ln_factorial(n: u64) -> f64 {
    if n < 2 {
        return 0.0;
    }
    if n < 32 {
        return (2..=n).map(|i| (i as f64).ln()).sum();
    }
    let x = n as f64 + 1.0;
    // Stirling series for ln Γ(x); accurate to ~1e-12 for x ≥ 32.
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x.powi(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: BurstParams = BurstParams {
        window_ms: 50.0,
        min_ops: 5,
    };

    fn points(times: &[(f64, u32)]) -> Vec<RetryPoint> {
        let mut p: Vec<RetryPoint> = times
            .iter()
            .map(|&(start_ms, op)| RetryPoint {
                start_ms,
                op,
                delay_ms: Some(1000.0),
            })
            .collect();
        p.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms).then(a.op.cmp(&b.op)));
        p
    }

    #[test]
    fn poisson_tail_matches_known_values() {
        // P(X ≥ 1 | λ = 1) = 1 − e^−1; P(X ≥ 10 | λ = 1) ≈ 1.1142e-7.
        assert!((poisson_tail(1, 1.0) - (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        assert!((poisson_tail(10, 1.0) / 1.1142e-7 - 1.0).abs() < 1e-3);
        assert_eq!(poisson_tail(3, 0.0), 0.0);
        // Far beyond f64's range in linear space, still ordered in log space.
        assert!(ln_poisson_tail(2000, 1.0) < ln_poisson_tail(1000, 1.0));
    }

    #[test]
    fn a_stray_retry_near_an_aligned_cluster_is_left_out() {
        let mut t: Vec<(f64, u32)> = (0..8).map(|op| (1000.0, op)).collect();
        t.push((985.0, 50));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ops, (0..8).collect::<Vec<_>>());
        assert_eq!(b[0].width_ms, 0.0);
    }

    #[test]
    fn aligned_retries_of_many_operations_are_a_burst() {
        let mut t: Vec<(f64, u32)> = (0..8).map(|op| (1000.0, op)).collect();
        t.extend((0..20).map(|i| (i as f64 * 97.0, 100 + i)));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ops, (0..8).collect::<Vec<_>>());
        assert_eq!(
            (b[0].delay_min_ms, b[0].delay_max_ms),
            (Some(1000.0), Some(1000.0))
        );
    }

    #[test]
    fn a_jittered_wave_is_no_burst_however_many_operations_it_holds() {
        // 4000 retries spread evenly (full jitter) over 10 s: ~20 per 50 ms window.
        let mut state: u64 = 42;
        let t: Vec<(f64, u32)> = (0..4000)
            .map(|op| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 11) as f64 / (1u64 << 53) as f64 * 10_000.0, op)
            })
            .collect();
        assert!(find_bursts(0, &points(&t), PARAMS).is_empty());
    }

    #[test]
    fn too_few_operations_are_no_burst() {
        let t: Vec<(f64, u32)> = (0..4).map(|op| (1000.0, op)).collect();
        assert!(find_bursts(0, &points(&t), PARAMS).is_empty());
    }
}
