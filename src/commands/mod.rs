//! One module per command: each turns its flags into a configuration (`config`), runs the
//! pipeline, and hands the result to `output`.

pub mod analyze;
pub mod completions;
pub mod convert;
pub mod diff;
pub mod generate;
pub mod man;
pub mod merge;
pub mod replay;
pub mod show;

/// What the process sets up before any command runs: the allocator keeps freed memory
/// (see [`analyze::MI_OPTION_PURGE_DELAY`]), panics inside a library boundary stay quiet
/// (`crate::panics`), and the soft limit on open files is raised for the merge's readers.
pub fn prepare_process() {
    // SAFETY: sets a process-wide allocator option; no allocation is in flight in this call.
    unsafe { libmimalloc_sys::mi_option_set(analyze::MI_OPTION_PURGE_DELAY, -1) };
    crate::panics::install_hook();
    analyze::raise_open_files_limit();
}

/// The error as printed after `attempt-funnel: `: its causes joined, made safe for the
/// terminal (an error may quote a file name or a value from the input).
pub fn error_text(err: &anyhow::Error) -> String {
    crate::escape::terminal_lines(&format!("{err:#}")).into_owned()
}

/// A reader that stopped reading (`| head`): the run ends quietly.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    crate::output::is_broken_pipe(err)
}

/// The hidden `parquet-worker` command: see `ingest::run_parquet_worker`.
pub fn parquet_worker(columns: &[String]) -> i32 {
    crate::ingest::run_parquet_worker(columns)
}
