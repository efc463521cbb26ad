//! Stage timings for profiling: with `ATTEMPT_FUNNEL_PROFILE=1`, each pipeline stage's
//! wall time and the process's resident memory after it go to stderr. Off by default;
//! for finding where a run's time goes (bench/README.md).

use std::sync::OnceLock;
use std::time::Instant;

/// When the first stage began: mid-stage notes print the time since then.
static START: OnceLock<Instant> = OnceLock::new();

pub struct Stages {
    enabled: bool,
    since: Instant,
}

impl Stages {
    pub fn from_env() -> Stages {
        START.get_or_init(Instant::now);
        Stages {
            enabled: std::env::var_os("ATTEMPT_FUNNEL_PROFILE").is_some_and(|v| v != "0"),
            since: Instant::now(),
        }
    }

    pub fn mark(&mut self, stage: &str) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        eprintln!(
            "profile: {stage:<26} {:>8.3} s   rss {:>6} MB",
            (now - self.since).as_secs_f64(),
            resident_mb().map_or("?".to_string(), |mb| mb.to_string())
        );
        self.since = now;
    }
}

/// Resident set size from /proc (Linux); `None` elsewhere.
pub fn resident_mb() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096 / (1 << 20))
}

/// A mid-stage mark with the time since the first stage began, printed only when
/// profiling is on.
pub fn note(what: &str) {
    if std::env::var_os("ATTEMPT_FUNNEL_PROFILE").is_some_and(|v| v != "0") {
        let at = START.get_or_init(Instant::now).elapsed().as_secs_f64();
        eprintln!(
            "profile:   {what:<24} at {at:>7.3} s   rss {:>6} MB",
            resident_mb().unwrap_or(0)
        );
    }
}
