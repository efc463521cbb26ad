//! attempt-funnel: reads attempt events, rebuilds each logical operation's attempt tree,
//! and tells where one request became many, and why.
//!
//! Pipeline: ingest → normalize → group → classify → summary → report (→ gate). This file
//! parses the command line, hands it to its command (`commands/`), and prints the error.

mod analysis;
mod burst;
mod classify;
mod cli;
mod codec;
mod commands;
mod compare;
mod config;
mod convert;
mod diagnostics;
mod escape;
mod exit_codes;
#[cfg(test)]
mod fuzz;
mod gate;
mod generate;
mod group;
mod ingest;
mod model;
mod normalize;
mod output;
mod paint;
mod panics;
mod partial;
mod policy;
mod profile;
mod replay;
mod report;
mod rules;
mod select;
mod stats;
mod summary;
mod timeline;
mod words;
mod writer;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Command};

/// mimalloc: millions of small per-operation allocations from several threads are its
/// home ground. Built with `no_thp`: by default it asks the kernel for transparent huge
/// pages on its memory, and then the first touch of any byte of a 2 MiB range faults in
/// and zeroes all of it, so each thread's scattered small allocations held whole huge
/// pages. Without, on the benchmark's inputs: peak memory at 100 k operations 233 → 163 MB,
/// at 1 M 297–323 → 241–271 MB, at 10 M 457 → 411 MB, and 10 M took 37 s instead of 47
/// (1 M within the noise); BENCHMARKS.md, "Spilling earlier, no huge pages".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // SAFETY: sets a process-wide allocator option; no allocation is in flight in this call.
    unsafe { libmimalloc_sys::mi_option_set(commands::analyze::MI_OPTION_PURGE_DELAY, -1) };
    panics::install_hook();
    commands::analyze::raise_open_files_limit();
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(err) if output::is_broken_pipe(&err) => exit_codes::SUCCESS,
        Err(err) => {
            // An error may quote a file name or a value from the input.
            let text = format!("{err:#}");
            eprintln!("attempt-funnel: {}", escape::terminal_lines(&text));
            exit_codes::ERROR
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Analyze(args) => commands::analyze::run(args),
        Command::Generate(args) => commands::generate::generate(args),
        Command::Convert(args) => commands::convert::convert(args),
        Command::Show(args) => commands::show::run(args),
        Command::Replay(args) => commands::replay::replay(args),
        Command::Diff(args) => commands::diff::diff(args),
        Command::Merge(args) => commands::merge::merge(args),
        Command::Completions(args) => commands::completions::completions(args),
        Command::Man(args) => commands::man::man(&args.dir),
        Command::ParquetWorker(args) => Ok(ingest::run_parquet_worker(&args.columns)),
    }
}
