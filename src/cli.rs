//! The command line as clap sees it. `main.rs` turns it into a validated config; nothing
//! else uses these types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "attempt-funnel",
    version,
    about = "Finds the retry storms hidden in attempt logs: for every logical operation, the first hop where one request became many, and why.",
    after_help = "Exit codes: 0 analysed and no threshold breached, 1 a threshold breached, 2 usage, I/O or input error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Classify every operation in attempt logs and print the summary.
    Analyze(AnalyzeArgs),
    /// Show one operation's attempt tree and timeline, with its class and findings.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct InputArgs {
    /// Input files of attempt events (JSON Lines or logfmt, detected per file). With none,
    /// or with '-', events are read from standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Line format of the inputs. 'auto' looks at each file's first line.
    #[arg(long, value_enum, default_value_t = InputFormatArg::Auto)]
    pub input_format: InputFormatArg,

    /// Stop at the first bad input line instead of reporting it and going on.
    #[arg(long, conflicts_with = "skip_invalid")]
    pub strict: bool,

    /// Report only the number of bad input lines and keep the analysis exit code, instead of
    /// exiting 2.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Hop order, upstream first, comma-separated. Events at a hop not listed are input
    /// errors. Default: the policy's `hops`, else caller,gateway,consumer,dependency.
    #[arg(long, value_delimiter = ',', value_name = "HOP,HOP,...")]
    pub hops: Option<Vec<String>>,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,

    /// Write the report to FILE instead of standard output ('-' is standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Attempt budget of a hop: the most attempts allowed per line, as HOP=N. Repeatable.
    /// Default: 3 for every hop (one original and two retries).
    #[arg(long, value_name = "HOP=N")]
    pub budget: Vec<String>,

    /// Hop where overlapping attempts are intended (hedged requests): no overlap is
    /// reported there. Repeatable.
    #[arg(long, value_name = "HOP")]
    pub allow_overlap: Vec<String>,

    /// Widest time window, in milliseconds, that can hold a synchronized retry burst.
    /// Default: 50.
    #[arg(long, value_name = "MS")]
    pub burst_window: Option<f64>,

    /// Fewest distinct operations whose retries fall in one window to make a burst.
    /// Default: 5.
    #[arg(long, value_name = "N")]
    pub burst_min_ops: Option<usize>,

    /// Fail (exit 1) when this condition holds, e.g. 'nested-retry > 0', 'overlap > 1%',
    /// 'healthy < 95%', 'amplification@dependency > 2.5'. Repeatable; replaces a policy
    /// condition on the same metric. See docs/ci.md for the grammar.
    #[arg(long, value_name = "CONDITION")]
    pub fail_on: Vec<String>,

    /// Policy file (TOML) with failure conditions, budgets, hops allowed to overlap and
    /// burst parameters. Flags override it.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Report breached thresholds but exit 0, to roll a gate out before enforcing it.
    #[arg(long)]
    pub report_only: bool,

    /// Write the gate's thresholds as JUnit XML to FILE (one test case per threshold).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// How many of the worst operations the summary lists with their funnels.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InputFormatArg {
    Auto,
    Jsonl,
    Logfmt,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// A terminal summary.
    Table,
    /// The summary as one JSON document with a schema_version.
    Json,
    /// One JSON object per operation.
    Jsonl,
    /// One CSV row per operation.
    Csv,
    /// The summary as GitHub-flavoured Markdown (incident documents, CI job summaries).
    Markdown,
    /// A self-contained HTML page with charts and attempt timelines (incident reviews).
    Html,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The operation to show: its operation_id, or `RUN/OPERATION` as the reports write it.
    #[arg(value_name = "OPERATION_ID")]
    pub operation_id: String,

    /// The test run of the operation, where the same operation ID is in several runs.
    #[arg(long, value_name = "TEST_RUN_ID")]
    pub run: Option<String>,

    #[command(flatten)]
    pub input: InputArgs,

    /// Attempt budget of a hop, as for `analyze`. Repeatable.
    #[arg(long, value_name = "HOP=N")]
    pub budget: Vec<String>,

    /// Hop where overlapping attempts are intended, as for `analyze`. Repeatable.
    #[arg(long, value_name = "HOP")]
    pub allow_overlap: Vec<String>,

    /// Widest window of a synchronized burst in ms, as for `analyze`. Default: 50.
    #[arg(long, value_name = "MS")]
    pub burst_window: Option<f64>,

    /// Fewest operations in a synchronized burst, as for `analyze`. Default: 5.
    #[arg(long, value_name = "N")]
    pub burst_min_ops: Option<usize>,

    /// Policy file (TOML): its budgets, hops, queue hops, overlap and burst settings apply,
    /// as for `analyze`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
