//! Synchronized bursts (SPEC §3): across all operations, clusters of retries at one hop that
//! start within one narrow window, from many operations, far more than the surrounding
//! retry rate explains. Aligned failures retried on one fixed schedule make them; jittered
//! retries spread out and do not.

use crate::config::BurstParams;
use crate::model::Millis;

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
pub fn find_bursts(hop: u16, points: &[RetryPoint], params: BurstParams) -> Vec<Burst> {
    let w = params.window_ms;
    let times: Vec<Millis> = points.iter().map(|p| p.start_ms).collect();
    // Number of retry starts t with from < t <= to.
    let count_between = |from: Millis, to: Millis| {
        times.partition_point(|&t| t <= to) - times.partition_point(|&t| t <= from)
    };
    let mut bursts = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let t0 = times[i];
        let end = times.partition_point(|&t| t <= t0 + w);
        let count = end - i;
        if count < params.min_ops {
            i += 1;
            continue;
        }
        // The busier side sets the expected rate, so the leading or trailing edge of a
        // jittered wave (quiet on one side, busy on the other) is not mistaken for a burst.
        let before = times.partition_point(|&t| t < t0)
            - times.partition_point(|&t| t < t0 - NEIGHBOUR_WINDOWS * w);
        let after = count_between(t0 + w, t0 + w + NEIGHBOUR_WINDOWS * w);
        let expected = (before.max(after) as f64) / NEIGHBOUR_WINDOWS;
        let p = poisson_tail(count as u64, expected);
        if p >= BURST_P_VALUE {
            i += 1;
            continue;
        }
        let mut ops: Vec<u32> = points[i..end].iter().map(|p| p.op).collect();
        ops.sort_unstable();
        ops.dedup();
        if ops.len() < params.min_ops {
            i += 1;
            continue;
        }
        let delays = points[i..end].iter().filter_map(|p| p.delay_ms);
        bursts.push(Burst {
            hop,
            start_ms: t0,
            width_ms: times[end - 1] - t0,
            retries: count,
            ops,
            expected_retries: expected,
            p_value: p,
            delay_min_ms: delays.clone().reduce(Millis::min),
            delay_max_ms: delays.reduce(Millis::max),
        });
        i = end;
    }
    bursts
}

/// P(X ≥ k) for X ~ Poisson(λ), summed in log space so large counts neither overflow nor
/// underflow to a wrong zero.
pub fn poisson_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    let ln_pmf = |n: u64| -lambda + n as f64 * lambda.ln() - ln_factorial(n);
    if (k as f64) <= lambda {
        // In the bulk: 1 − P(X < k) is accurate enough and the sum is short.
        let below: f64 = (0..k).map(|n| ln_pmf(n).exp()).sum();
        return (1.0 - below).max(0.0);
    }
    let mut total = 0.0;
    let mut n = k;
    loop {
        let term = ln_pmf(n).exp();
        total += term;
        if term < total * 1e-12 || term == 0.0 {
            break;
        }
        n += 1;
    }
    total
}

fn ln_factorial(n: u64) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let x = n as f64 + 1.0;
    // Stirling series for ln Γ(x); exact to ~1e-10 for x ≥ 2, more than the test needs.
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
