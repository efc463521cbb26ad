//! The command line as clap sees it. `main.rs` turns it into a validated config; nothing
//! else uses these types.

// The doc comments here are clap's help texts, which name TOML tables such as `[hop_map]`:
// plain text for the user, not intra-doc links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::ingest::{InputFormat, Preset};
use crate::report::OutputFormat;

/// Exit codes of `analyze` (and of the commands that report as it does), at the end of
/// their `--help` (the numbers are `exit_codes.rs`). A macro, so that `analyze`'s own
/// ending can put examples before the same text.
macro_rules! analyze_exit_codes {
    () => {
        "Exit codes: 0 analysed and no threshold breached (or breached under --report-only); 1 a threshold breached; 2 usage, I/O or input error (bad input lines, unless --skip-invalid)."
    };
}
const ANALYZE_EXIT_CODES: &str = analyze_exit_codes!();
/// The end of `analyze --help`: a few first runs, then the exit codes.
const ANALYZE_HELP_END: &str = concat!(
    "Examples:
  attempt-funnel analyze app.log                   a log of attempt events, mixed with other lines
  kubectl logs -l app=checkout --prefix | attempt-funnel analyze
  attempt-funnel analyze --preset envoy access.log a tool's own log (envoy, istio, k6)
  attempt-funnel analyze --field operation_id=request_id --field duration_ms=took app.jsonl
  attempt-funnel analyze --fail-on 'nested-retry > 0' --junit gate.xml logs/

",
    analyze_exit_codes!()
);
const SHOW_EXIT_CODES: &str =
    "Exit codes: 0 shown; 2 usage, I/O or input error, or the operation is not in the input.";
const CONVERT_EXIT_CODES: &str = "Exit codes: 0 converted; 2 usage, I/O or input error (bad input lines, unless --skip-invalid).";
const WRITE_EXIT_CODES: &str = "Exit codes: 0 written; 2 usage or I/O error.";

#[derive(Debug, Parser)]
#[command(
    name = "attempt-funnel",
    version,
    propagate_version = true,
    about = "Finds the retry storms hidden in attempt logs: for every logical operation, the first hop where one request became many, and why.",
    after_help = "Exit codes: 0 analysed and no threshold breached, 1 a threshold breached, 2 usage, I/O or input error. Each command's --help lists its own."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Classify every operation in attempt logs and print the summary.
    #[command(after_help = ANALYZE_HELP_END)]
    Analyze(AnalyzeCommand),
    /// Write synthetic attempt logs (JSON Lines, interleaved by time) with a chosen mix of
    /// shapes: to try the tool or a gate without logs of your own, or to benchmark it.
    #[command(after_help = WRITE_EXIT_CODES)]
    Generate(GenerateArgs),
    /// Write the attempts read from any input (OTLP, Zipkin, JSON Lines, logfmt) as native
    /// JSON Lines attempt records, one per line: what the span mapping produced, ready for
    /// `analyze` or other tools.
    #[command(after_help = CONVERT_EXIT_CODES)]
    Convert(ConvertArgs),
    /// Show one operation's attempt tree and timeline, with its class and findings.
    #[command(after_help = SHOW_EXIT_CODES)]
    Show(ShowArgs),
    /// Replay the observed attempts under a candidate retry policy and compare: would it
    /// have stopped the storm, and what would it have cost? The gate applies to the
    /// replayed run. See docs/replay.md.
    #[command(after_help = ANALYZE_EXIT_CODES)]
    Replay(ReplayArgs),
    /// Finish an analysis split into partitions: merge the partials that
    /// `analyze --format partial` wrote (one per share of the operations) into the report,
    /// the gate and the exit code of one run over all their input. See docs/scale.md.
    #[command(after_help = ANALYZE_EXIT_CODES)]
    Merge(MergeArgs),
    /// Compare two runs (before and after a fix, a pull request against a baseline): each
    /// side is attempt logs or a summary saved with `analyze --format json`. `--fail-on`
    /// takes change conditions such as 'amplification@dependency increased > 10%'.
    #[command(after_help = ANALYZE_EXIT_CODES)]
    Diff(DiffArgs),
    /// Print a shell completion script to standard output, e.g.
    /// `attempt-funnel completions bash > ~/.local/share/bash-completion/completions/attempt-funnel`.
    #[command(after_help = WRITE_EXIT_CODES)]
    Completions(CompletionsArgs),
    /// Write the man pages, generated from these definitions: attempt-funnel.1 and one page
    /// per command (attempt-funnel-analyze.1, …) into DIR.
    #[command(hide = true, after_help = WRITE_EXIT_CODES)]
    Man(ManArgs),
    /// Internal: reads a Parquet file from standard input with polars and writes its rows
    /// to standard output for the attempt-funnel process that started it. Run apart so that
    /// a corrupt file that aborts polars ends only this process.
    #[command(name = crate::ingest::PARQUET_WORKER_COMMAND, hide = true)]
    ParquetWorker(ParquetWorkerArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ParquetWorkerArgs {
    /// A column to read when the file holds it (repeated).
    #[arg(long = "column", value_name = "NAME")]
    pub columns: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created when missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// How the terminal reports look: colour, the table's characters.
#[derive(Debug, Args)]
pub struct StyleArgs {
    /// When to colour class names and the gate's verdicts: 'auto' colours on a terminal
    /// unless NO_COLOR is set (CLICOLOR_FORCE=1 colours even when piped); 'always' and
    /// 'never' ignore both.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorArg::Auto, help_heading = "Output")]
    pub color: ColorArg,

    /// Draw tables and trees with ASCII characters only (+, -, |), for terminals and logs
    /// that cannot show box-drawing characters.
    #[arg(long, help_heading = "Output")]
    pub ascii: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// Colour when writing to a terminal, unless NO_COLOR is set; CLICOLOR_FORCE forces it.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

#[derive(Debug, Args)]
pub struct InputArgs {
    /// Input files: attempt events (JSON Lines, logfmt or Parquet) or spans (OTLP JSON,
    /// Jaeger JSON, Zipkin v2 JSON; one per line, or whole documents as downloaded), plain
    /// or compressed with gzip or zstd, all detected per file from
    /// its content. A directory means every file under it (hidden ones skipped); a quoted
    /// glob pattern such as 'logs/*.jsonl.gz' is expanded. With none, or with '-', input is
    /// read from standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    #[command(flatten)]
    pub options: InputOptions,
}

/// How inputs are read, whichever they are (`diff` names its two inputs its own way).
#[derive(Debug, Default, Args)]
pub struct InputOptions {
    /// Format of text inputs. 'auto' tells spans and trace documents from attempt events by
    /// each file's first line, and reads each line of attempt events in the format it is
    /// written in (JSON or logfmt), passing by the lines that are not attempts (banners,
    /// stack traces, records without an operation ID); a named format reads every line in
    /// it. Compression and Parquet are always detected from the content.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto, help_heading = "Input")]
    pub input_format: InputFormat,

    /// Spans of a service are attempts at this hop, as SERVICE=HOP; SERVICE:KIND=HOP for
    /// spans of one kind only (client, server, producer, consumer, internal); HOP '-' means
    /// they are not attempts. Repeatable; overrides the policy's [hop_map]. Default: a
    /// service named like a hop (api-gateway → gateway). Formerly --hop-map. See
    /// docs/formats.md.
    #[arg(
        long = "hop-map",
        alias = "hop",
        value_name = "SERVICE=HOP",
        help_heading = "Mapping"
    )]
    pub hop_map: Vec<String>,

    /// Span attribute that holds the operation ID (e.g. http.request.header.idempotency-key);
    /// spans without it take it from the span above them. Default: the trace ID.
    #[arg(long, value_name = "KEY", help_heading = "Mapping")]
    pub operation_attribute: Option<String>,

    /// Span or resource attribute that holds the test run ID. Default: cicd.pipeline.run.id.
    #[arg(long, value_name = "KEY", help_heading = "Mapping")]
    pub run_attribute: Option<String>,

    /// Read our key OUR from the log's key THEIRS, for logs with their own key names
    /// (JSON Lines, logfmt, Parquet): 'operation_id=request_id', 'hop=kubernetes.labels.app'
    /// (dots step into nested objects), 'target=attributes["http.route"]' (a key with dots
    /// in it). Also: retry_count (retries before the attempt, 0 = the original), and
    /// duration_ms, duration_s, duration_us, duration_ns or duration (a number in
    /// --time-unit, or with its unit: '250ms', '1.5s'), which give the finish from the start
    /// or the start from the finish. THEIRS '-': the log has no such key. Repeatable;
    /// overrides the policy's [fields]. See docs/input.md.
    #[arg(long = "field", value_name = "OUR=THEIRS", help_heading = "Mapping")]
    pub fields: Vec<String>,

    /// The log's hop VALUE is our hop HOP, e.g. checkout-api=caller. Repeatable; overrides
    /// the policy's [hop_values].
    #[arg(long = "hop-value", value_name = "VALUE=HOP", help_heading = "Mapping")]
    pub hop_values: Vec<String>,

    /// The number of the original attempt in the log's attempt numbers: 1 (ours, the
    /// default) or 0.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1), help_heading = "Mapping")]
    pub attempt_base: Option<u32>,

    /// The unit of numeric times and of durations given without one: s, ms (the default),
    /// us or ns (e.g. epoch seconds: --time-unit s). RFC 3339 times are unaffected.
    #[arg(long, value_name = "UNIT", help_heading = "Mapping")]
    pub time_unit: Option<String>,

    /// Read a tool's JSON log as the tool writes it: envoy (a JSON access log with the
    /// attempt count), istio (the default JSON access log), k6 (k6 run --out json=FILE),
    /// ecs (an Elastic Common Schema log).
    /// Repeatable: each reaches only the files it recognises by their first line, so
    /// '--preset k6 --preset envoy k6.json envoy.log app.jsonl' joins a load test with the
    /// gateway's and the services' logs. See docs/input.md for what each reads.
    #[arg(long, value_enum, value_name = "TOOL", help_heading = "Mapping")]
    pub preset: Vec<Preset>,

    /// Stop at the first bad input line instead of reporting it and going on; a line that
    /// is not an attempt is then a bad line too.
    #[arg(long, conflicts_with = "skip_invalid", help_heading = "Input")]
    pub strict: bool,

    /// Report only the number of bad input lines and keep the analysis exit code, instead of
    /// exiting 2.
    #[arg(long, help_heading = "Input")]
    pub skip_invalid: bool,

    /// Longest input line read, in bytes (suffixes K, M, G or KiB, MiB, GiB, all
    /// powers of 1024); a longer line is a bad line, skipped without being held in memory.
    /// Default: 1MiB for attempt events (JSON Lines, logfmt), 64MiB for span lines (OTLP,
    /// Zipkin), which hold a whole export batch each.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Input")]
    pub max_line_bytes: Option<u64>,

    /// Hop order, upstream first, comma-separated. Events at a hop not listed are input
    /// errors. Default: the policy's `hops`, else caller,gateway,consumer,dependency.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "HOP,HOP,...",
        help_heading = "Rules"
    )]
    pub hops: Option<Vec<String>>,
}

/// The classification rules' settings, shared by `analyze` and `show` so that both see an
/// operation the same way.
#[derive(Debug, Default, Args)]
pub struct RuleArgs {
    /// Attempt budget of a hop: the most attempts allowed per line, as HOP=N. Repeatable.
    /// Default: 3 for every hop (one original and two retries).
    #[arg(long, value_name = "HOP=N", help_heading = "Rules")]
    pub budget: Vec<String>,

    /// Deadline of a hop, as HOP=MS: the most time one line there may take from its first
    /// attempt's start, backoff included. An attempt started after it, or backoff delays
    /// adding up past it, are findings. Repeatable; overrides the policy's [deadlines].
    /// Default: none.
    #[arg(long, value_name = "HOP=MS", help_heading = "Rules")]
    pub deadline: Vec<String>,

    /// Hop where overlapping attempts are intended (hedged requests): no overlap is
    /// reported there. Repeatable.
    #[arg(long, value_name = "HOP", help_heading = "Rules")]
    pub allow_overlap: Vec<String>,

    /// Widest time window, in milliseconds, that can hold a synchronized retry burst.
    /// Default: 50.
    #[arg(long, value_name = "MS", help_heading = "Rules")]
    pub burst_window: Option<f64>,

    /// Fewest distinct operations whose retries fall in one window to make a burst.
    /// Default: 5.
    #[arg(long, value_name = "N", help_heading = "Rules")]
    pub burst_min_ops: Option<usize>,

    /// Policy file (TOML) with failure conditions, budgets, deadlines, hops allowed to
    /// overlap, queue hops, burst parameters, the span hop map and the input's key
    /// mapping ([fields], [hop_values]). Flags override it.
    #[arg(long, value_name = "FILE", help_heading = "Rules")]
    pub policy: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[command(flatten)]
    pub rules: RuleArgs,

    /// Keep only the operations of partition K of N (K from 0 to N-1), e.g. 3/8: for N
    /// workers that each read all the input and take their share. An operation's partition
    /// is a stable hash of its test run and operation ID (docs/scale.md). Lines read and bad
    /// lines are reported by partition 0 only, so that they count once in a merge.
    #[arg(long, value_name = "K/N", help_heading = "Scale")]
    pub partition: Option<crate::model::Partition>,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// The report and the gate over it: the flags `analyze`, `replay`, `merge` and `diff` share,
/// written once so that their help says the same. Where a command reads one differently
/// (merge's and diff's formats, diff's change conditions), its own struct replaces that
/// flag's help with `mut_arg`; help given that way keeps no final full stop, like the
/// help clap takes from a doc comment.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = OutputFormat::Table, help_heading = "Output")]
    pub format: OutputFormat,

    /// Write the report to FILE instead of standard output ('-' is standard output).
    /// Required by '--format parquet'.
    #[arg(long, short = 'o', value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Fail (exit 1) when this condition holds, e.g. 'nested-retry > 0', 'overlap > 1%',
    /// 'healthy < 95%', 'amplification@dependency > 2.5'. Repeatable; replaces a policy
    /// condition on the same metric. See docs/ci.md for the grammar.
    #[arg(long, value_name = "CONDITION", help_heading = "Gate")]
    pub fail_on: Vec<String>,

    /// Report breached thresholds but exit 0, to roll a gate out before enforcing it.
    #[arg(long, help_heading = "Gate")]
    pub report_only: bool,

    /// Accept an input without a single valid attempt (exit 0, and a gate over it passes).
    /// Without it, such a run exits 2 ("no attempts read from …"), gate or not: a pipeline
    /// that lost its logs, or a wrong `kubectl` selector, must not look like a healthy
    /// system.
    #[arg(long, help_heading = "Gate")]
    pub allow_empty: bool,

    /// Write the gate's thresholds as JUnit XML to FILE (one test case per threshold, and an
    /// error when the run failed on its input). '-' is standard output, when the report goes
    /// to --output FILE.
    #[arg(long, value_name = "FILE", help_heading = "Gate")]
    pub junit: Option<PathBuf>,

    /// How many of the worst operations the summary lists with their funnels.
    #[arg(long, value_name = "N", default_value_t = 10, help_heading = "Output")]
    pub top: usize,

    #[command(flatten)]
    pub style: StyleArgs,
}

/// `analyze`: its settings, and the memory budget only it has (the other commands need
/// all events at once: `show` and `replay` look up operations in them, `convert` writes
/// them in input order).
#[derive(Debug, Args)]
pub struct AnalyzeCommand {
    #[command(flatten)]
    pub analyze: AnalyzeArgs,

    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// How much memory the events may take, and where the rest goes.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Memory budget (suffixes K, M, G or KiB, MiB, GiB, all powers of 1024). When the
    /// events read would not fit in it, they are partitioned by operation into files under
    /// --temp-dir and analysed one partition at a time, with the same result. Default: 1GiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Scale")]
    pub memory_limit: Option<u64>,

    /// Directory for the partition files, removed when the run ends. Default: the system's
    /// temporary directory (TMPDIR).
    #[arg(long, value_name = "DIR", help_heading = "Scale")]
    pub temp_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(mut_arg("format", |a| a.help(MERGE_FORMAT_HELP)))]
pub struct MergeArgs {
    /// Partials written by `attempt-funnel analyze --format partial`, plain or compressed
    /// with gzip or zstd (detected from the content). A directory means every file under it
    /// (hidden ones skipped); a quoted glob pattern such as 'parts/*.partial.zst' is
    /// expanded. With none, or with '-', they are read from standard input, where several
    /// partials may follow each other.
    #[arg(value_name = "PARTIAL")]
    pub files: Vec<PathBuf>,

    /// Policy file (TOML): its failure conditions apply here. Its rule settings (hops,
    /// budgets, deadlines, overlap and queue hops, burst parameters, inner budgets, layer
    /// inference, retryable statuses) must be those the partials were made with, or the
    /// merge stops and names the one that differs.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Merge a set of `--partition K/N` partials with some of the N missing, instead of
    /// refusing it: the report then says in every format (headline, JSON `incomplete`,
    /// the gate's verdict) that it covers only the partitions merged. A missing partition's
    /// operations are not in the report, so its counts and the gate's verdict are those
    /// of a part of the input.
    #[arg(long)]
    pub allow_missing: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// `merge --format`: a merge writes the report, never another partial.
const MERGE_FORMAT_HELP: &str = "Output format (every format of `analyze` but 'partial')";

#[derive(Debug, Args)]
// A replay's retry budgets span operations: it is not split into partitions.
#[command(mut_arg("partition", |a| a.hide(true)))]
pub struct ReplayArgs {
    /// The candidate retry policy (TOML): per hop max_attempts, retry_on, backoff and a
    /// retry budget; an operation deadline_ms. Hops it does not name keep their observed
    /// behaviour. See docs/replay.md.
    #[arg(long, value_name = "FILE")]
    pub candidate: PathBuf,

    /// Seed of the candidate's full-jitter draws: the same seed and input give the same
    /// replay.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    #[command(flatten)]
    pub analyze: AnalyzeArgs,
}

#[derive(Debug, Args)]
// Two runs, not one: the per-operation formats need both runs' operations, and --fail-on
// also takes conditions on the change between them.
#[command(
    mut_arg("format", |a| a.help(DIFF_FORMAT_HELP)),
    mut_arg("fail_on", |a| a.help(DIFF_FAIL_ON_HELP))
)]
pub struct DiffArgs {
    /// The first run (the baseline): attempt logs — a file, a directory or a quoted glob
    /// pattern — or a summary saved with `attempt-funnel analyze --format json`.
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// The second run (the change), in the same forms as BEFORE.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    #[command(flatten)]
    pub input: InputOptions,

    #[command(flatten)]
    pub rules: RuleArgs,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// `diff --format`: which formats a saved summary can feed.
const DIFF_FORMAT_HELP: &str = "Output format. The per-operation formats (jsonl, csv, parquet) need attempt logs on both sides";

/// `diff --fail-on`: change conditions besides the plain ones.
const DIFF_FAIL_ON_HELP: &str = "Fail (exit 1) when this condition holds. A change condition compares the runs: 'METRIC increased OP LIMIT' or 'METRIC decreased OP LIMIT', with LIMIT a change in the metric's unit or, with '%', relative to BEFORE: 'nested-retry increased > 0', 'amplification@dependency increased > 10%'. A plain condition ('overlap > 1%') judges AFTER. Repeatable. See docs/ci.md";

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Number of logical operations to generate.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub ops: u64,

    /// Seed of the random generator. The same seed, --ops and --mix give the same bytes.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Share of operations per shape, as SHAPE=WEIGHT (relative weights; comma-separated or
    /// repeated). The shapes named make up the mix. Shapes: healthy, nested-retry, fan-out,
    /// redelivery, overlap, burst, over-budget. Default:
    /// healthy=70,nested-retry=8,fan-out=7,redelivery=5,overlap=5,burst=5.
    #[arg(long, value_delimiter = ',', value_name = "SHAPE=WEIGHT,...")]
    pub mix: Vec<String>,

    /// Write the events to FILE instead of standard output ('-' is standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write 'operation_id,class' per operation to FILE: the class that `analyze`
    /// gives it under the default rules, by construction. '-' is standard output, when the
    /// events go to --output FILE.
    #[arg(long, value_name = "FILE")]
    pub expected: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Write the attempt records to FILE instead of standard output ('-' is standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Policy file (TOML); convert uses its hops, queue_hops, [hop_map] and key mapping
    /// ([fields], [hop_values], attempt_base, time_unit).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The operation to show: its operation_id, or `RUN/OPERATION` as the reports write it.
    /// Given alone, an existing file or directory is the input instead, and the operation
    /// shown is the one it holds (`attempt-funnel show trace.json`).
    #[arg(value_name = "OPERATION_ID")]
    pub operation_id: String,

    /// The test run of the operation, where the same operation ID is in several runs.
    #[arg(long, value_name = "TEST_RUN_ID")]
    pub run: Option<String>,

    #[command(flatten)]
    pub input: InputArgs,

    #[command(flatten)]
    pub rules: RuleArgs,

    #[command(flatten)]
    pub style: StyleArgs,
}

// The choices of `--preset`, `--format` and `--input-format` are the domain's own enums:
// their names and their help are given here, once, and nothing maps a copy of them.

/// `--preset` takes the presets' own names, each with what it reads as its help.
impl ValueEnum for Preset {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()).help(self.reads()))
    }
}

/// `--format`: the formats' own names ([`OutputFormat::name`]).
impl ValueEnum for OutputFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            OutputFormat::Table => "A terminal summary",
            OutputFormat::Json => "The summary as one JSON document with a schema_version",
            OutputFormat::Jsonl => "One JSON object per operation",
            OutputFormat::Csv => "One CSV row per operation",
            OutputFormat::Markdown => {
                "The summary as GitHub-flavoured Markdown (incident documents, CI job summaries)"
            }
            OutputFormat::Parquet => "The per-operation rows as a Parquet file; needs --output FILE",
            OutputFormat::Html => {
                "A self-contained HTML page with charts and attempt timelines (incident reviews)"
            }
            OutputFormat::Partial => {
                "`analyze` only: this partition's result before the merge, one JSON object per line, for `attempt-funnel merge` (docs/scale.md)"
            }
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

/// `--input-format`.
impl ValueEnum for InputFormat {
    fn value_variants<'a>() -> &'a [Self] {
        // Every variant, in the order `--help` lists them: the match below names each one.
        &[
            InputFormat::Auto,
            InputFormat::Jsonl,
            InputFormat::Logfmt,
            InputFormat::Otlp,
            InputFormat::Zipkin,
            InputFormat::Jaeger,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let (name, help) = match self {
            InputFormat::Auto => ("auto", "Each file's format from its first line"),
            InputFormat::Jsonl => ("jsonl", "Attempt events, one JSON object per line"),
            InputFormat::Logfmt => (
                "logfmt",
                "Attempt events as key=value pairs, one event per line",
            ),
            InputFormat::Otlp => (
                "otlp",
                "OpenTelemetry OTLP JSON, {\"resourceSpans\":[…]} (or Tempo's {\"batches\":[…]}) per line or as documents",
            ),
            InputFormat::Zipkin => (
                "zipkin",
                "Zipkin v2 JSON: a span, or an array of spans, per line or as documents",
            ),
            InputFormat::Jaeger => (
                "jaeger",
                "Jaeger JSON, as its UI downloads it and its query API returns it: {\"data\":[…]}",
            ),
        };
        Some(PossibleValue::new(name).help(help))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    /// The report flags are written once; `merge` and `diff` replace the help of only the
    /// flags they read differently, and the replacement stays theirs.
    #[test]
    fn merge_and_diff_say_where_their_report_flags_differ() {
        let cli = Cli::command();
        let help = |command: &str, id: &str| -> String {
            let command = cli.find_subcommand(command).expect(command);
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            arg.and_then(|a| a.get_help()).expect(id).to_string()
        };
        assert!(help("diff", "fail_on").contains("'METRIC increased OP LIMIT'"));
        assert!(!help("analyze", "fail_on").contains("increased"));
        assert!(help("merge", "format").contains("but 'partial'"));
        assert!(help("diff", "format").contains("attempt logs on both sides"));
        assert_eq!(help("analyze", "format"), "Output format");
        assert_eq!(help("replay", "fail_on"), help("merge", "fail_on"));
    }
}

/// A size in bytes: `1048576`, `512K`, `1MiB`, `64M`, `2GiB` (every suffix a power of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "'{text}' is not a size: write bytes, or a number with K, M or G, e.g. 8MiB"
            ))
        }
    };
    let n: u64 = digits.parse().map_err(|_| {
        format!("'{text}' is not a size: write bytes, or a number with K, M or G, e.g. 8MiB")
    })?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err("the size must be at least 1 byte, e.g. 8MiB".to_string()),
        Some(bytes) => Ok(bytes),
        None => Err(format!("'{text}' is too large")),
    }
}

#[cfg(test)]
mod size_tests {
    use super::parse_size;

    #[test]
    fn sizes_read_with_binary_suffixes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("64 mb"), Ok(64 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        for bad in ["", "MiB", "1.5M", "-1", "0", "1T", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
