//! The exit codes are a contract with CI scripts (docs/ci.md).

/// Analysed, and no threshold breached.
pub const SUCCESS: i32 = 0;
/// A threshold breached: a result, not an error.
pub const THRESHOLD_BREACHED: i32 = 1;
/// Usage, I/O or input error (including bad input lines, unless --skip-invalid).
pub const ERROR: i32 = 2;
