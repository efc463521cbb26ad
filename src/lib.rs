//! attempt-funnel's library: everything the `attempt-funnel` command does, behind the
//! command line it parses.
//!
//! The public surface is deliberately small. [`cli`] is the command line (clap derive),
//! [`commands`] runs one parsed command and returns its exit code, and [`exit_codes`]
//! names those codes (0 ok, 1 a threshold breached, 2 a usage, I/O or input error). The
//! binary parses, dispatches to [`commands`] and exits; it holds no logic of its own.
//!
//! Inside, the pipeline runs in layers, each a module that imports only those below it:
//!
//! - the command layer: `commands` (one file per command), `config` (flags, policy file
//!   and defaults resolved once into each command's configuration) and `output` (where a
//!   report goes);
//! - the edges: `ingest` reads files, directories, globs and stdin into events (and
//!   spills partitions to disk when memory runs short); `report` and `writer` render the
//!   summary in every output format;
//! - the analysis, pure functions: `normalize` pairs events into attempts, `group` links
//!   them into lines, `classify` decides each hop's facts, `partial` holds the per-operation
//!   rows that `merge` combines across partitions or machines, `burst` finds retry storms
//!   across operations, `summary` computes every number a report prints, once, and `gate`
//!   turns `--fail-on` conditions into the exit code;
//! - the foundation: `model` (events and hops), `rules` (budgets, deadlines, hop order),
//!   `policy` (the policy file), `stats`, `codec` and the small helpers.
//!
//! `docs/architecture.md` draws the pipeline in full.
//!
//! A program runs a command as the binary does: parse its command line, hand it to its
//! command, read the exit code. The report goes where the command line says (here a file).
//!
//! ```
//! use clap::Parser;
//! use attempt_funnel::cli::{Cli, Command};
//! use attempt_funnel::{commands, exit_codes};
//!
//! let report = std::env::temp_dir().join(format!("attempt-funnel-doc-{}.json", std::process::id()));
//! let cli = Cli::parse_from([
//!     "attempt-funnel", "analyze", "fixtures/classes/nested-retry.jsonl",
//!     "--format", "json", "--output", report.to_str().unwrap(),
//!     "--fail-on", "nested-retry > 0",
//! ]);
//! let Command::Analyze(args) = cli.command else { unreachable!() };
//! // The fixture's operations retried at two layers: the gate breaches.
//! assert_eq!(commands::analyze::run(args)?, exit_codes::THRESHOLD_BREACHED);
//! let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&report)?)?;
//! assert_eq!(summary["classes"][1]["class"], "nested-retry");
//! assert_eq!(summary["classes"][1]["operations"], 3);
//! std::fs::remove_file(&report)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

mod analysis;
mod atomic;
mod burst;
mod classify;
pub mod cli;
mod codec;
pub mod commands;
mod compare;
mod config;
mod convert;
mod diagnostics;
mod escape;
pub mod exit_codes;
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
