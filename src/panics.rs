//! Panics in a library we call, caught at our boundary. polars panics on some corrupt
//! Parquet files instead of returning an error; the Parquet worker process runs it inside
//! `catch_unwind` and sends the panic back as an input error (see `ingest::parquet`).
//! While such a boundary is active, the panic hook stays silent: the user sees the error
//! that names the file, not a panic message and a backtrace hint.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Boundaries active now, in any thread (polars panics in its own worker threads too).
static QUIET: AtomicUsize = AtomicUsize::new(0);

/// Installs the hook: the default one, unless a [`Quiet`] boundary is active.
pub fn install_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if QUIET.load(Ordering::SeqCst) == 0 {
            default(info);
        }
    }));
}

/// While alive, panics are caught by the caller and not printed.
pub struct Quiet(());

impl Quiet {
    pub fn new() -> Quiet {
        QUIET.fetch_add(1, Ordering::SeqCst);
        Quiet(())
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        QUIET.fetch_sub(1, Ordering::SeqCst);
    }
}
