//! attempt-funnel: reads attempt events, rebuilds each logical operation's attempt tree,
//! and tells where one request became many, and why.
//!
//! Pipeline: ingest → normalize → group → classify → summary → report (→ gate).

mod analysis;
mod burst;
mod classify;
mod cli;
mod codec;
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

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result};
use clap::Parser;

use crate::cli::{
    AnalyzeArgs, Cli, Command, ConvertArgs, FormatArg, InputArgs, InputFormatArg, ShowArgs,
};
use crate::config::{AnalyzeConfig, GateConfig, OutputTarget, ShowConfig};
use crate::diagnostics::BadInputPolicy;
use crate::gate::condition::{Condition, Origin};
use crate::ingest::spans::mapping::SpanMapping;
use crate::ingest::{
    split_pair, InputConfig, InputFormat, InputPath, KeyMapping, Preset, TimeUnit,
};
use crate::report::{OutputFormat, Style};
use crate::rules::{HopOrder, Rules};
use crate::stats::AttemptStats;

/// mimalloc: millions of small per-operation allocations from several threads are its
/// home ground. Built with `no_thp`: by default it asks the kernel for transparent huge
/// pages on its memory, and then the first touch of any byte of a 2 MiB range faults in
/// and zeroes all of it, so each thread's scattered small allocations held whole huge
/// pages. Without, on the benchmark's inputs: peak memory at 100 k operations 233 → 163 MB,
/// at 1 M 297–323 → 241–271 MB, at 10 M 457 → 411 MB, and 10 M took 37 s instead of 47
/// (1 M within the noise); BENCHMARKS.md, "Spilling earlier, no huge pages".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (v3), which libmimalloc-sys does not name. By
/// default freed memory is handed back to the kernel after a delay and comes back as freshly
/// zeroed (often huge) pages: on a 1 M-event input that zeroing was 40% of all CPU time. A
/// run is short; keep the memory. A test checks the number against mimalloc's own name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // SAFETY: sets a process-wide allocator option; no allocation is in flight in this call.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    panics::install_hook();
    raise_open_files_limit();
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => exit_codes::SUCCESS,
        Err(err) => {
            // An error may quote a file name or a value from the input.
            let text = format!("{err:#}");
            eprintln!("attempt-funnel: {}", escape::terminal_lines(&text));
            exit_codes::ERROR
        }
    };
    std::process::exit(code);
}

/// A spilled run's merge reads one file per partition at once, for each hop searched at
/// once: hundreds at tens of millions of operations, and more where partitions were split
/// again. The soft limit on open files (often 1 024) is raised to the hard one, or as near
/// as the system lets a process go (macOS refuses an unlimited one).
#[cfg(unix)]
fn raise_open_files_limit() {
    // SAFETY: getrlimit and setrlimit read and write only the struct they are given.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let current = limit.rlim_cur;
        for wanted in [limit.rlim_max, 10_240] {
            if wanted > current {
                limit.rlim_cur = wanted;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    return;
                }
            }
        }
    }
}

#[cfg(not(unix))]
fn raise_open_files_limit() {}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Analyze(args) => {
            let budget = ingest::spill::Budget {
                limit_bytes: args
                    .memory
                    .memory_limit
                    .unwrap_or(ingest::spill::DEFAULT_MEMORY_LIMIT),
                temp_dir: args.memory.temp_dir,
            };
            if args.memory.memory_limit.is_some()
                && matches!(args.analyze.report.format, FormatArg::Partial)
            {
                anyhow::bail!(
                    "--format partial holds its partition's events in memory and does not take --memory-limit: make each partition smaller with --partition K/N"
                );
            }
            let mut config = analyze_config(args.analyze)?;
            config.input.budget = Some(budget);
            analyze(config)
        }
        Command::Generate(args) => generate(args),
        Command::Convert(args) => convert(args),
        Command::Show(args) => show(show_config(args)?),
        Command::Replay(args) => replay(args),
        Command::Diff(args) => diff(args),
        Command::Merge(args) => merge(args),
        Command::Completions(args) => {
            // Into a buffer first: clap_complete panics on a write error such as a closed
            // pipe; write_output reports it instead.
            let mut script = Vec::new();
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut command, "attempt-funnel", &mut script);
            write_output(&OutputTarget::Stdout, &script)?;
            Ok(exit_codes::SUCCESS)
        }
        Command::Man(args) => man(&args.dir),
        Command::ParquetWorker(args) => Ok(ingest::run_parquet_worker(&args.columns)),
    }
}

/// `man DIR`: the man pages, generated from the clap definitions.
fn man(dir: &Path) -> Result<i32> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("could not create '{}'", dir.display()))?;
    let command = <Cli as clap::CommandFactory>::command();
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("could not write the man pages to '{}'", dir.display()))?;
    eprintln!(
        "attempt-funnel: man pages written to '{}' (read one with: man {}/attempt-funnel.1)",
        dir.display(),
        dir.display()
    );
    Ok(exit_codes::SUCCESS)
}

/// `--color`: `always` and `never` as said; `auto` colours a terminal unless `NO_COLOR` is
/// set to anything but the empty string, and colours anything when `CLICOLOR_FORCE` is set
/// to anything but `0` (NO_COLOR wins: it is the user's own refusal).
fn wants_color(
    choice: cli::ColorArg,
    terminal: bool,
    no_color: Option<std::ffi::OsString>,
    clicolor_force: Option<std::ffi::OsString>,
) -> bool {
    let refused = no_color.is_some_and(|v| !v.is_empty());
    let forced = clicolor_force.is_some_and(|v| !v.is_empty() && v != "0");
    match choice {
        cli::ColorArg::Always => true,
        cli::ColorArg::Never => false,
        cli::ColorArg::Auto => !refused && (forced || terminal),
    }
}

fn color_for(choice: cli::ColorArg, terminal: bool) -> bool {
    wants_color(
        choice,
        terminal,
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

/// The terminal reports' style for output to `target`: fitted to the terminal's width and
/// coloured only when that output is the terminal.
fn style(args: &cli::StyleArgs, target: &OutputTarget) -> Style {
    let terminal = *target == OutputTarget::Stdout && std::io::stdout().is_terminal();
    Style {
        width: if terminal {
            terminal_size::terminal_size_of(std::io::stdout())
                .map(|(terminal_size::Width(w), _)| usize::from(w))
        } else {
            None
        },
        color: color_for(args.color, terminal),
        ascii: args.ascii,
    }
}

/// `generate`: events to `--output` (or stdout), expected classes to `--expected`.
fn generate(args: cli::GenerateArgs) -> Result<i32> {
    let opts = generate::Options {
        ops: args.ops,
        seed: args.seed,
        mix: generate::Mix::parse(&args.mix)?,
    };
    let output = OutputTarget::stdout_unless(args.output);
    let expected = args.expected.map(OutputTarget::from_flag);
    if output == OutputTarget::Stdout && expected == Some(OutputTarget::Stdout) {
        anyhow::bail!(
            "--expected - and the events would both go to standard output: give the events --output FILE, e.g. -o events.jsonl --expected -"
        );
    }
    let out = open_output(&output)?;
    let expected = expected.as_ref().map(open_output).transpose()?;
    let stats =
        generate::generate(&opts, out, expected).context("could not write the generated events")?;
    eprintln!("{}", stats.summary());
    Ok(exit_codes::SUCCESS)
}

/// `convert`: read, normalize, write attempt records; bad input as for `analyze`.
fn convert(args: ConvertArgs) -> Result<i32> {
    let policy = match &args.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    let rules = base_rules(&args.input.options, &policy, args.policy.as_deref())?;
    let input = input_config(args.input, &rules, &policy)?;
    let ingested = ingest::read_inputs(&input, &rules.hops)?;
    let converted = convert::convert(ingested, &rules.hops)?;
    write_output(&OutputTarget::stdout_unless(args.output), &converted.bytes)?;
    if let Some(stats) = &converted.span_stats {
        eprintln!("{}", convert::span_note(stats, converted.records));
    }
    if converted.duplicate_events > 0 {
        eprintln!(
            "attempt-funnel: {} written once",
            plural(
                converted.duplicate_events,
                "exact duplicate event",
                "exact duplicate events"
            )
        );
    }
    Ok(converted.diagnostics.report())
}

/// `analyze`. The gate's verdict, its exit code and the JUnit file depend on the input and
/// the conditions only: a reader of the report that stops reading (`| head`) changes none of
/// them, and a run that stops on an error still leaves a JUnit file that says so.
fn analyze(config: AnalyzeConfig) -> Result<i32> {
    let (junit, report_only) = (config.gate.junit.clone(), config.gate.report_only);
    junit_on_error(junit, report_only, analyze_run(config))
}

/// A run that stopped on an error still writes its `--junit` file, saying so.
fn junit_on_error(
    junit: Option<OutputTarget>,
    report_only: bool,
    result: Result<i32>,
) -> Result<i32> {
    result.inspect_err(|err| {
        if let Some(target) = &junit {
            let failed = gate::RunError {
                message: "the run stopped on an error before the gate".to_string(),
                detail: format!("attempt-funnel: {err:#}"),
            };
            let xml = gate::junit_xml(
                &gate::GateReport::without_conditions(report_only),
                Some(&failed),
            );
            // The error itself is what the run reports; a JUnit file that cannot be written
            // either adds nothing to it.
            let _ = write_output(target, xml.as_bytes());
        }
    })
}

/// Why a gate over zero operations fails (`--allow-empty` lets it pass).
const NO_ATTEMPTS: &str = "no attempts read, so no condition could be checked: the input holds no valid attempt event (pass --allow-empty if an empty input is fine)";

fn analyze_run(config: AnalyzeConfig) -> Result<i32> {
    if config.format == OutputFormat::Partial {
        return write_partial(config);
    }
    let mut stages = profile::Stages::from_env();
    let read = ingest::read_partitioned(&config.input, &config.rules.hops)?;
    stages.mark("ingest");
    // The worst operations keep their attempts for the timelines.
    let keep = analysis::Keep::Worst(config.top.min(summary::TIMELINES_DRAWN));
    let mut out = RowsOut::open(&config)?;
    let analysis = out.run(|sink| analyze_partitions(read, &config.rules, &keep, config.top, sink));
    stages.mark("normalize+group+classify");
    report_run(&config, analysis?, out, stages)
}

/// Analyses what was read: everything at once when it fitted the memory budget, else each
/// spilled partition in turn into a partial, then the partials merged (the merge that
/// `attempt-funnel merge` runs over partials from several machines).
fn analyze_partitions(
    read: ingest::Partitioned,
    rules: &Rules,
    keep: &analysis::Keep,
    listed: usize,
    sink: &mut dyn analysis::tally::RowSink,
) -> Result<analysis::Analysis> {
    if read.spill.is_none() {
        return partial::analyze(read.head, rules, keep, listed, sink);
    }
    release_free_memory(PARTITION_PURGE_DELAY_MS);
    let mut partials: Vec<partial::Partial> = Vec::new();
    let mut purge = PartitionPurge::default();
    let dir = read.partitions(
        |part, dir, number| {
            crate::profile::note("partition read back");
            // Each partition knows the trace end of all the input: nothing is deferred. Its
            // events are dropped once analysed; its strings are read into again. Its rows
            // and retry starts wait on disk for the merge: no partition's rows stay in
            // memory, and the merge reads the retry starts one hop at a time.
            let name = format!("partition-{number}");
            let partial = partial::build(part, rules, keep, true, dir.map(|d| (d, name.as_str())))?;
            if dir.is_some() {
                crate::profile::note("partition spilled");
            }
            Ok(partial)
        },
        |mut partial| {
            // Statistics are folded into the first partition's as each one ends, in the
            // partitions' order, and the merge adds up the same numbers: a partition's
            // time histogram and latency sketches are a megabyte or two, and the 155
            // partitions of 30 M operations held theirs until the merge, a third of that
            // run's peak memory.
            if let Some(first) = partials.first_mut() {
                let stats =
                    std::mem::replace(&mut partial.stats, AttemptStats::new(rules.hops.len()));
                first.stats.merge(&stats)?;
            }
            partials.push(partial);
            purge.after_partition();
            crate::profile::note("partition analysed");
            Ok(())
        },
    )?;
    // The merge's peak is the burst rule's, one hop's retry starts at a time: what one hop
    // freed is gone before the next one's are read.
    release_free_memory(0);
    let analysis = partial::merge(partials, rules, keep.worst(listed), sink);
    drop(dir);
    analysis
}

/// `analyze --format partial`: this partition's result, before the merge. It keeps the
/// attempts of its [`summary::TIMELINES_DRAWN`] worst operations whatever `--top` is (the
/// merge's `--top` decides), and defers operations with an unfinished attempt: only the
/// merge knows where all the input ends. The gate runs at the merge.
fn write_partial(config: AnalyzeConfig) -> Result<i32> {
    if config
        .gate
        .conditions
        .iter()
        .any(|c| c.origin == Origin::Flag)
        || config.gate.junit.is_some()
    {
        anyhow::bail!(
            "--fail-on and --junit apply to the whole run: give them to `attempt-funnel merge`, which gates the merged partials"
        );
    }
    let mut ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let keep = analysis::Keep::Worst(summary::TIMELINES_DRAWN);
    let partial = partial::build(&mut ingested, &config.rules, &keep, false, None)?;
    drop(ingested);
    let mut out = std::io::BufWriter::new(open_output(&config.output)?);
    partial::format::write(&partial, &mut out)
        .with_context(|| format!("could not write the partial to {}", config.output.display()))?;
    Ok(partial::merge::diagnostics(std::slice::from_ref(&partial)).report())
}

/// Hands what the allocator caches now back to the system, and from now on memory freed
/// `delay_ms` after it is freed. A spilled run reads partition after partition into memory
/// freed by the one before; kept (see [`MI_OPTION_PURGE_DELAY`]), what each partition left
/// in the allocator's caches added up over the run (3.4 GB at 10 M operations under a
/// 1 GiB limit).
fn release_free_memory(delay_ms: std::ffi::c_long) {
    // SAFETY: sets a process-wide allocator option, as `main` does, and asks the allocator
    // to purge what it caches; any thread may call these.
    unsafe {
        // Pages the collection frees now go back at once.
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        libmimalloc_sys::mi_collect(true);
        // What was freed earlier under a delay waits in the arenas: a forced collection
        // purges it only while the delay is positive (at 0 mimalloc's purge returns at
        // once, "nothing will be scheduled"), so it stayed, the last partition's event
        // vector through the merge among it.
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1);
        libmimalloc_sys::mi_collect(true);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay_ms);
    }
}

/// When the pages freed by a partition are handed back to the system: not after every
/// partition, as each partition's pass needs about as much memory as the one before, and
/// would fault in and zero again the pages just handed back (at 1 M operations, 168 k
/// page faults over a run against 90 k never handing any back, and 7 % of its time).
/// Kept, what the allocator caches drifts upwards, a few MB a partition (each thread's
/// heap keeps what it freed, and the next partition's work lands on other threads): 196 →
/// 277 MB over the 16 partitions of 1 M operations. So the free pages go back once the
/// resident memory at a partition's end has grown a tenth past the first partition's end;
/// where it cannot be read (not Linux), after every partition.
#[derive(Debug, Default)]
struct PartitionPurge {
    /// The resident memory at the first partition's end, in MB.
    first_mb: Option<u64>,
}

impl PartitionPurge {
    /// The growth past the first partition's resident memory allowed before a purge: a
    /// tenth (a twentieth and a fifth were no faster at 1 M operations, five alternating
    /// runs each).
    const DRIFT_DIVISOR: u64 = 10;

    fn after_partition(&mut self) {
        if self.purge_at(crate::profile::resident_mb()) {
            release_free_memory(PARTITION_PURGE_DELAY_MS);
        }
    }

    /// Whether to purge at a partition's end with `now_mb` resident.
    fn purge_at(&mut self, now_mb: Option<u64>) -> bool {
        match (self.first_mb, now_mb) {
            (_, None) => true,
            (None, Some(now)) => {
                self.first_mb = Some(now);
                false
            }
            (Some(first), Some(now)) => now > first + first / Self::DRIFT_DIVISOR,
        }
    }
}

/// The purge delay while partitions are analysed: not at once, because handing back every
/// page the moment it was freed makes the per-operation pass fault in and zero the same
/// pages again and again. Measured both ways in one session's benchmarks (BENCHMARKS.md):
/// 100 ms took 9 % off the time at 1 M and 10 M operations and 14 % at 30 M, for 15 % more
/// peak memory (1 M: 417 → 480 MB; 30 M: 699 → 769 MB, well within the 1 GiB default).
/// The merge purges at once (`analyze_partitions`): its working set is the run's largest.
/// Then 1000 ms rather than 100: at 1 M operations a partition is read back and analysed
/// in about 0.4 s, and pages its reading freed were handed back before its pass could take
/// them again. Three alternating pairs at 1 M: wall 3.72–3.75 → 3.34–3.55 s, page faults
/// 163–172 k → 152–156 k, CPU 5.8–5.9 → 5.2–5.6 s; peak 225–238 → 233–241 MB. At 10 M two
/// pairs differed by less than the machine's noise, for 257–261 → 278–288 MB of peak.
const PARTITION_PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// `merge`: partials → the merged analysis → the same report, gate and exit code as one
/// `analyze` run over all their input.
fn merge(args: cli::MergeArgs) -> Result<i32> {
    let (junit, report_only) = (
        args.report.junit.clone().map(OutputTarget::from_flag),
        args.report.report_only,
    );
    junit_on_error(junit, report_only, merge_run(args))
}

fn merge_run(args: cli::MergeArgs) -> Result<i32> {
    let mut stages = profile::Stages::from_env();
    let (config, parts) = merge_config(args)?;
    stages.mark("read partials");
    let worst = analysis::Worst {
        listed: config.top,
        drawn: config.top.min(summary::TIMELINES_DRAWN),
    };
    let mut out = RowsOut::open(&config)?;
    let analysis = out.run(|sink| partial::merge(parts, &config.rules, worst, sink));
    stages.mark("merge");
    report_run(&config, analysis?, out, stages)
}

/// Reads the partials and resolves the merge's configuration: the rules are those the
/// partials were made with (the first one's; the merge refuses others), the gate's
/// conditions come from the flags and the policy file.
fn merge_config(args: cli::MergeArgs) -> Result<(AnalyzeConfig, Vec<partial::Partial>)> {
    let cli::MergeArgs {
        files,
        policy: policy_path,
        report,
    } = args;
    if matches!(report.format, FormatArg::Partial) {
        anyhow::bail!(OutputFormat::Partial.refusal().unwrap_or_default());
    }
    let paths = input_paths(files);
    let parts = read_partials(&paths)?;
    let first = &parts[0];
    let rules = first
        .rules
        .rules()
        .with_context(|| format!("invalid partial '{}'", first.origin))?;
    let policy = match &policy_path {
        Some(path) => {
            let policy = policy::load(path)?;
            check_policy_rules(&rules, &policy, path, &first.origin)?;
            policy
        }
        None => policy::Policy::default(),
    };
    let analyze_args = AnalyzeArgs {
        input: InputArgs {
            files: Vec::new(),
            options: cli::InputOptions::default(),
        },
        rules: cli::RuleArgs::default(),
        partition: None,
        report,
    };
    let mut config = analyze_config_with(analyze_args, &policy, policy_path.as_deref(), rules)?;
    config.input.paths = paths;
    Ok((config, parts))
}

/// Every partial in the inputs, in order (a stream may hold several).
fn read_partials(paths: &[InputPath]) -> Result<Vec<partial::Partial>> {
    let ingest::source::Resolved { inputs, notes } = ingest::source::resolve(paths)?;
    for note in notes {
        eprintln!("attempt-funnel: {note}");
    }
    let progress = ingest::progress::Progress::new(false, None);
    let mut parts = Vec::new();
    for input in &inputs {
        match ingest::source::open(input, &progress.counter())? {
            // The rows of a partial file stay there until the merge streams them out.
            ingest::source::Content::Lines { text: reader, .. } => parts.extend(partial::format::read(
                &input.name,
                std::io::BufReader::with_capacity(1 << 20, reader),
                input.rereadable().then_some(input),
            )?),
            ingest::source::Content::Parquet(_) => anyhow::bail!(
                "'{}' is a Parquet file, not a partial: give merge the files written by attempt-funnel analyze --format partial",
                input.name
            ),
        }
    }
    Ok(parts)
}

/// A policy given to `merge` may not change a rule the partials were made under: applied
/// over their rules, it must leave every setting as it was.
fn check_policy_rules(
    rules: &Rules,
    policy: &policy::Policy,
    path: &Path,
    partial: &str,
) -> Result<()> {
    let invalid = || format!("invalid policy '{}'", path.display());
    let mut applied = rules.clone();
    if let Some(hops) = &policy.hops {
        applied.hops = HopOrder::new(hops.clone()).with_context(invalid)?;
    }
    if applied.hops == rules.hops {
        policy.check_hops(&rules.hops).with_context(invalid)?;
        if let Some(queues) = &policy.queue_hops {
            applied.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
        }
        apply_policy_rules(&mut applied, policy)?;
    }
    let ours = partial::RulesFingerprint::of(rules);
    if let Some(difference) = ours.difference(&partial::RulesFingerprint::of(&applied)) {
        anyhow::bail!(
            "the policy '{}' sets other rules than the partials were made with, so the merge would not be the analysis they describe: {difference} (the partials' ('{partial}'), then the policy's); give the partials' analysis the same policy",
            path.display()
        );
    }
    Ok(())
}

/// Where the merge's rows go in `analyze` and `merge`: the gate's tally of the operations
/// behind each condition, and the per-operation writer when the report is one (its rows
/// are written as the merge makes them, never held whole).
struct RowsOut {
    blame: gate::Blame,
    rows: Option<report::RowWriter<ClosedPipe<Box<dyn Write>>>>,
    /// The file the rows go to, when it is a plain file: removed if the run fails before it
    /// is complete.
    file: Option<std::path::PathBuf>,
}

impl RowsOut {
    fn open(config: &AnalyzeConfig) -> Result<RowsOut> {
        // The rows are written while the inputs may still be read (a merge reads partial
        // files again): writing over one of them would destroy it mid-run.
        if let OutputTarget::File(out) = &config.output {
            let same = |input: &InputPath| match input {
                InputPath::File(p) => std::fs::canonicalize(p)
                    .ok()
                    .zip(std::fs::canonicalize(out).ok())
                    .is_some_and(|(a, b)| a == b),
                InputPath::Stdin => false,
            };
            if config.input.paths.iter().any(same) {
                anyhow::bail!(
                    "--output '{}' is also an input: the report would overwrite it while it is read; write it to another file",
                    out.display()
                );
            }
        }
        let rows = match report::row_format(config.format) {
            Some(format) => {
                let out = ClosedPipe {
                    inner: open_output(&config.output)?,
                    closed: false,
                };
                Some(report::RowWriter::new(format, &config.rules.hops, out)?)
            }
            None => None,
        };
        Ok(RowsOut {
            blame: gate::Blame::new(&config.gate.conditions, &config.rules.hops),
            // Only a file of our own making is removed on failure: `-o /dev/null` or a link
            // to a device or a pipe names something that is not the report's to delete
            // (as root, a failed run deleted the device).
            file: match (&rows, &config.output) {
                (Some(_), OutputTarget::File(path))
                    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) =>
                {
                    Some(path.clone())
                }
                _ => None,
            },
            rows,
        })
    }

    /// Runs an analysis with its rows sent here; a failed one leaves no partial row file.
    fn run(
        &mut self,
        analyse: impl FnOnce(&mut dyn analysis::tally::RowSink) -> Result<analysis::Analysis>,
    ) -> Result<analysis::Analysis> {
        let result = match &mut self.rows {
            Some(rows) => analyse(&mut analysis::tally::Both(&mut self.blame, rows)),
            None => analyse(&mut self.blame),
        };
        if result.is_err() {
            self.rows = None;
            if let Some(path) = self.file.take() {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }
}

/// The report, the gate and the exit code of an analysis (read and analysed, or merged),
/// whose rows went to `out`.
fn report_run(
    config: &AnalyzeConfig,
    analysis: analysis::Analysis,
    out: RowsOut,
    mut stages: profile::Stages,
) -> Result<i32> {
    let summary = summary::summarize(&analysis, &config.rules)?;
    stages.mark("summary");
    let verdict = (!config.gate.conditions.is_empty()).then(|| {
        gate::evaluate(
            &config.gate.conditions,
            &summary,
            &analysis.tally,
            &out.blame,
            &config.rules.hops,
            config.gate.report_only,
        )
    });
    let report = match out.rows {
        // Written as the merge made them: the last batch and the file's end remain.
        Some(rows) => Report::Written(
            rows.finish()
                .with_context(|| format!("could not write '{}'", config.output.display())),
        ),
        None => Report::Bytes(report::render(
            config.format,
            &summary,
            verdict.as_ref(),
            &config.style,
        )?),
    };
    let code = conclude(report, verdict.as_ref(), config, &[&analysis]);
    stages.mark("report");
    code
}

/// A report to write: rendered whole, or per-operation rows already written.
enum Report {
    Bytes(Vec<u8>),
    Written(Result<()>),
}

/// Writes a report to `target`.
fn write_report(target: &OutputTarget, report: Report) -> Result<()> {
    match report {
        Report::Bytes(bytes) => write_output(target, &bytes),
        Report::Written(result) => result,
    }
}

/// A writer whose reader may stop reading (`| head`): the rest of the report is discarded
/// instead of failing the batch writers, whose errors do not all keep the I/O error's kind.
struct ClosedPipe<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> Write for ClosedPipe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.inner.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            _ if self.closed => Ok(()),
            other => other,
        }
    }
}

/// The end of a run that may gate: the JUnit file, the report, the gate's lines, duplicate
/// events and bad input lines on stderr, and the exit code they add up to. `analyses`: the
/// runs read from input (both sides of a `diff`).
fn conclude(
    report: Report,
    verdict: Option<&gate::GateReport>,
    config: &AnalyzeConfig,
    analyses: &[&analysis::Analysis],
) -> Result<i32> {
    // Every condition holds vacuously over nothing: a pipeline that lost its logs, or read
    // only garbage under --skip-invalid, must not look green (a `diff` needs both sides).
    let empty_gate = verdict.is_some()
        && !config.gate.allow_empty
        && analyses.iter().any(|a| a.tally.operations == 0);
    // The JUnit file first: it must not depend on the report's reader (per-operation rows
    // were written as the merge made them, before the verdict existed).
    if let Some(target) = &config.gate.junit {
        // Written even without conditions, so that the CI step uploading it finds it.
        if verdict.is_none() {
            eprintln!(
                "attempt-funnel: --junit: no failure conditions (give --fail-on, or fail_on in the --policy file); '{}' has no test cases",
                target.display()
            );
        }
        let empty = gate::GateReport::without_conditions(config.gate.report_only);
        let no_attempts = empty_gate.then(|| gate::RunError {
            message: NO_ATTEMPTS.to_string(),
            detail: format!("attempt-funnel: gate: {NO_ATTEMPTS}"),
        });
        let input = analyses
            .iter()
            .find_map(|a| input_error(&a.diagnostics))
            .or(no_attempts);
        let xml = gate::junit_xml(verdict.unwrap_or(&empty), input.as_ref());
        ignore_closed_pipe(write_output(target, xml.as_bytes()))?;
    }
    // A closed stdout ends the report, not the run: the verdict and the exit code follow.
    let report_written = ignore_closed_pipe(write_report(&config.output, report));
    let mut code = exit_codes::SUCCESS;
    if let Some(report) = verdict {
        for line in gate::log_lines(report, config.stderr_color) {
            eprintln!("{line}");
        }
        if !report.passed && !report.report_only {
            code = exit_codes::THRESHOLD_BREACHED;
        }
    }
    for analysis in analyses {
        if analysis.duplicate_events > 0 {
            eprintln!(
                "attempt-funnel: {} counted once ({}{})",
                plural(
                    analysis.duplicate_events,
                    "exact duplicate event",
                    "exact duplicate events"
                ),
                analysis.duplicate_examples.join(", "),
                if analysis.duplicate_events > analysis.duplicate_examples.len() as u64 {
                    ", …"
                } else {
                    ""
                }
            );
        }
        // An input error outranks a breach: the verdict was reached on incomplete input.
        code = code.max(analysis.diagnostics.report());
    }
    if empty_gate {
        eprintln!("attempt-funnel: gate: {NO_ATTEMPTS}");
        code = exit_codes::ERROR;
    }
    report_written?;
    Ok(code)
}

/// Splits `--fail-on` texts into change conditions (parsed here) and plain ones (left for
/// [`analyze_config`]).
fn change_conditions(
    fail_on: &mut Vec<String>,
    hops: &HopOrder,
) -> Result<Vec<compare::change::ChangeCondition>> {
    let (changes, plain): (Vec<String>, Vec<String>) = std::mem::take(fail_on)
        .into_iter()
        .partition(|t| compare::change::is_change(t));
    *fail_on = plain;
    changes
        .iter()
        .map(|t| compare::change::parse(t, hops, Origin::Flag))
        .collect::<Result<Vec<_>>>()
        .context("in --fail-on")
}

/// The hop order the flags and policy give, before anything else is resolved: change
/// conditions are parsed against it.
fn hops_for(args: &AnalyzeArgs) -> Result<HopOrder> {
    let policy = match &args.rules.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    Ok(base_rules(&args.input.options, &policy, args.rules.policy.as_deref())?.hops)
}

/// `replay`: the observed run and the same run replayed under the candidate, through the
/// same analysis; the comparison report; the gate on the replayed run.
fn replay(args: cli::ReplayArgs) -> Result<i32> {
    let report = &args.analyze.report;
    let (junit, report_only) = (
        report.junit.clone().map(OutputTarget::from_flag),
        report.report_only,
    );
    junit_on_error(junit, report_only, replay_run(args))
}

fn replay_run(mut args: cli::ReplayArgs) -> Result<i32> {
    if args.analyze.partition.is_some() {
        anyhow::bail!(
            "replay does not take --partition: a candidate's retry budget spans operations, so a replay reads every operation (--partition is for analyze)"
        );
    }
    let hops = hops_for(&args.analyze)?;
    let changes = change_conditions(&mut args.analyze.report.fail_on, &hops)?;
    let (candidate_path, seed) = (args.candidate.clone(), args.seed);
    let config = analyze_config(args.analyze)?;
    if let Some(why) = config.format.refusal() {
        anyhow::bail!(why);
    }
    let rules = &config.rules;
    let candidate = replay::candidate::load(&candidate_path, &rules.hops)?;
    let mut ingested = ingest::read_inputs(&config.input, &rules.hops)?;
    let prepared = replay::prepare(&ingested, rules);
    let drawn = config.top.min(summary::TIMELINES_DRAWN);
    let observed = analysis::tally::Collected::of(|sink| {
        partial::analyze_in_place(
            &mut ingested,
            rules,
            &analysis::Keep::Worst(drawn),
            config.top,
            sink,
        )
    })?;
    let replayed_run = replay::run(&prepared, &candidate, seed, rules, &mut ingested.strings)?;
    drop(prepared);
    let observed_worst = observed
        .kept
        .iter()
        .filter_map(|k| {
            let key = &k.result.key;
            select::find_operation(&ingested, &key.operation_id, key.test_run_id.as_deref()).ok()
        })
        .collect();
    let replayed = analysis::tally::Collected::of(|sink| {
        partial::analyze_attempts(
            &ingested,
            &replayed_run.operations,
            rules,
            &analysis::Keep::WorstAnd(drawn, observed_worst),
            observed.events,
            replayed_run.trace_end_ms,
            (config.top, sink),
        )
    })?;
    let before = summary::summarize(&observed, rules)?;
    let mut after = summary::summarize(&replayed, rules)?;
    // The same input was read once; the replayed run reports it as read.
    after.input = before.input.clone();
    let gate = compare::change::gate(
        &config.gate.conditions,
        &changes,
        (&before, Some(&observed)),
        (&after, Some(&replayed)),
        &rules.hops,
        config.gate.report_only,
    )?;
    let facts = compare::ReplayFacts {
        counts: &replayed_run.counts,
        notes: &replayed_run.notes,
        keys: replayed_run
            .notes
            .iter()
            .map(|n| ingested.operation_key(n.op))
            .collect(),
    };
    let mut comparison = compare::compare(
        compare::Kind::Replay,
        compare::Side {
            summary: before,
            analysis: Some(&observed),
            saved: None,
        },
        compare::Side {
            summary: after,
            analysis: Some(&replayed),
            saved: None,
        },
        rules,
        Some(facts),
    );
    comparison.gate = gate;
    let bytes = report::render_comparison(
        config.format,
        &comparison,
        Some(&observed),
        Some(&replayed),
        rules,
        &config.style,
    )?;
    conclude(
        Report::Bytes(bytes),
        comparison.gate.as_ref(),
        &config,
        &[&observed],
    )
}

/// One side of `diff`, as read.
enum DiffSide {
    Logs {
        analysis: Box<analysis::tally::Collected>,
        summary: Box<summary::Summary>,
    },
    Saved {
        summary: Box<summary::Summary>,
        json: serde_json::Value,
    },
}

impl DiffSide {
    fn analysis(&self) -> Option<&analysis::tally::Collected> {
        match self {
            DiffSide::Logs { analysis, .. } => Some(analysis),
            DiffSide::Saved { .. } => None,
        }
    }

    fn summary(&self) -> &summary::Summary {
        match self {
            DiffSide::Logs { summary, .. } | DiffSide::Saved { summary, .. } => summary,
        }
    }

    fn side(&self) -> compare::Side<'_> {
        compare::Side {
            summary: self.summary().clone(),
            analysis: self.analysis(),
            saved: match self {
                DiffSide::Saved { json, .. } => Some(json.clone()),
                DiffSide::Logs { .. } => None,
            },
        }
    }
}

/// Reads one side of `diff`: a saved summary, or attempt logs analysed with `config`,
/// keeping the worst operations and those named in `also` for the timelines.
fn diff_side(
    path: &Path,
    config: &AnalyzeConfig,
    also: &[model::OperationKey],
) -> Result<DiffSide> {
    if let Some((summary, json)) = compare::saved::read(path)? {
        return Ok(DiffSide::Saved {
            summary: Box::new(summary),
            json,
        });
    }
    let mut input = config.input.clone();
    input.paths = vec![if path.as_os_str() == "-" {
        InputPath::Stdin
    } else {
        InputPath::File(path.to_path_buf())
    }];
    let ingested = ingest::read_inputs(&input, &config.rules.hops)?;
    let ops = also
        .iter()
        .filter_map(|k| {
            select::find_operation(&ingested, &k.operation_id, k.test_run_id.as_deref()).ok()
        })
        .collect();
    let drawn = config.top.min(summary::TIMELINES_DRAWN);
    let analysis = analysis::tally::Collected::of(|sink| {
        partial::analyze(
            ingested,
            &config.rules,
            &analysis::Keep::WorstAnd(drawn, ops),
            config.top,
            sink,
        )
    })?;
    let summary = summary::summarize(&analysis, &config.rules)?;
    Ok(DiffSide::Logs {
        analysis: Box::new(analysis),
        summary: Box::new(summary),
    })
}

/// `diff`: two runs (attempt logs or saved summaries), the comparison report, and the gate
/// with change conditions.
fn diff(args: cli::DiffArgs) -> Result<i32> {
    let (junit, report_only) = (
        args.report.junit.clone().map(OutputTarget::from_flag),
        args.report.report_only,
    );
    junit_on_error(junit, report_only, diff_run(args))
}

fn diff_run(args: cli::DiffArgs) -> Result<i32> {
    let mut analyze_args = AnalyzeArgs {
        input: InputArgs {
            files: Vec::new(),
            options: args.input,
        },
        rules: args.rules,
        partition: None,
        report: args.report,
    };
    let hops = hops_for(&analyze_args)?;
    let changes = change_conditions(&mut analyze_args.report.fail_on, &hops)?;
    let config = analyze_config(analyze_args)?;
    if let Some(why) = config.format.refusal() {
        anyhow::bail!(why);
    }
    let rules = &config.rules;
    let first = diff_side(&args.before, &config, &[])?;
    let worst: Vec<model::OperationKey> = first
        .analysis()
        .map(|a| a.kept.iter().map(|k| k.result.key.clone()).collect())
        .unwrap_or_default();
    let second = diff_side(&args.after, &config, &worst)?;
    let gate = compare::change::gate(
        &config.gate.conditions,
        &changes,
        (first.summary(), first.analysis()),
        (second.summary(), second.analysis()),
        &rules.hops,
        config.gate.report_only,
    )?;
    let mut comparison = compare::compare(
        compare::Kind::Diff,
        first.side(),
        second.side(),
        rules,
        None,
    );
    comparison.gate = gate;
    let bytes = report::render_comparison(
        config.format,
        &comparison,
        first.analysis(),
        second.analysis(),
        rules,
        &config.style,
    )?;
    let analyses: Vec<&analysis::Analysis> = [first.analysis(), second.analysis()]
        .into_iter()
        .flatten()
        .map(|c| &c.analysis)
        .collect();
    conclude(
        Report::Bytes(bytes),
        comparison.gate.as_ref(),
        &config,
        &analyses,
    )
}

/// `show`: the whole pipeline (bursts look across operations), keeping one operation's
/// attempts, then its tree and timeline.
fn show(config: ShowConfig) -> Result<i32> {
    let ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let op = match &config.operation_id {
        Some(id) => select::find_operation(&ingested, id, config.test_run_id.as_deref())?,
        None => select::only_operation(&ingested, config.test_run_id.as_deref())?,
    };
    let shown = summary::display_operation_key(&ingested.operation_key(op));
    let keep = analysis::Keep::Operations(vec![op]);
    let analysis = partial::analyze(
        ingested,
        &config.rules,
        &keep,
        0,
        &mut analysis::tally::Discard,
    )?;
    let input_code = analysis.diagnostics.report();
    let Some(view) = summary::operation_view(&analysis, &config.rules) else {
        anyhow::bail!(
            "operation \"{shown}\" has no valid attempts: every event of it was a bad line (see above)"
        );
    };
    write_output(
        &OutputTarget::Stdout,
        report::show(&view, &config.style).as_bytes(),
    )?;
    Ok(input_code)
}

/// `1 exact duplicate event`, `7 exact duplicate events`.
fn plural(n: u64, singular: &str, plural: &str) -> String {
    words::counted(n, singular, plural)
}

/// The run failed on its input when it has bad lines that `--skip-invalid` did not accept:
/// the verdict covers the good lines only, and JUnit says so.
fn input_error(diagnostics: &diagnostics::Diagnostics) -> Option<gate::RunError> {
    diagnostics.failure().map(|message| gate::RunError {
        message,
        detail: diagnostics.shown_lines().join("\n"),
    })
}

/// A reader that stopped reading (`| head`) is not an error of the run.
fn ignore_closed_pipe(written: Result<()>) -> Result<()> {
    match written {
        Err(err) if is_broken_pipe(&err) => Ok(()),
        other => other,
    }
}

fn open_output(target: &OutputTarget) -> Result<Box<dyn Write>> {
    Ok(match target {
        OutputTarget::Stdout => Box::new(std::io::stdout().lock()),
        // Written on a thread of its own (see `writer`): a fresh file's pages cost the
        // kernel about as much as making the bytes.
        OutputTarget::File(p) => Box::new(
            writer::Behind::new(
                std::fs::File::create(p)
                    .with_context(|| format!("could not create '{}'", p.display()))?,
                format!("could not write '{}'", p.display()),
            )
            .with_context(|| format!("could not start writing '{}'", p.display()))?,
        ),
    })
}

fn write_output(target: &OutputTarget, bytes: &[u8]) -> Result<()> {
    match target {
        OutputTarget::File(p) => {
            std::fs::write(p, bytes).with_context(|| format!("could not write '{}'", p.display()))
        }
        OutputTarget::Stdout => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
            Ok(())
        }
    }
}

/// The inputs named on the command line: `-` is standard input, and so is no input at all.
fn input_paths(files: Vec<std::path::PathBuf>) -> Vec<InputPath> {
    let mut paths: Vec<InputPath> = files
        .into_iter()
        .map(|p| {
            if p.as_os_str() == "-" {
                InputPath::Stdin
            } else {
                InputPath::File(p)
            }
        })
        .collect();
    if paths.is_empty() {
        paths.push(InputPath::Stdin);
    }
    paths
}

fn input_config(args: InputArgs, rules: &Rules, policy: &policy::Policy) -> Result<InputConfig> {
    let InputArgs {
        files,
        options: args,
    } = args;
    let paths = input_paths(files);
    let mut spans = SpanMapping::new(&rules.hops, rules.queue_hops.clone());
    let from_policy: Vec<String> = policy
        .hop_map
        .iter()
        .map(|(service, hop)| format!("{service}={hop}"))
        .collect();
    spans.add_hop_rules("policy [hop_map]", &from_policy, &rules.hops)?;
    spans.add_hop_rules("--hop-map", &args.hop_map, &rules.hops)?;
    for (flag, value) in [
        ("--operation-attribute", &args.operation_attribute),
        ("--run-attribute", &args.run_attribute),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            anyhow::bail!(
                "{flag} needs an attribute name, e.g. {flag} http.request.header.idempotency-key"
            );
        }
    }
    let mapping = key_mapping(&args, rules, policy)?;
    let presets = presets(&args.preset)?;
    spans.operation_attribute = args.operation_attribute;
    if let Some(run) = args.run_attribute {
        spans.run_attribute = run;
    }
    Ok(InputConfig {
        paths,
        format: match args.input_format {
            InputFormatArg::Auto => InputFormat::Auto,
            InputFormatArg::Jsonl => InputFormat::Jsonl,
            InputFormatArg::Logfmt => InputFormat::Logfmt,
            InputFormatArg::Otlp => InputFormat::Otlp,
            InputFormatArg::Zipkin => InputFormat::Zipkin,
            InputFormatArg::Jaeger => InputFormat::Jaeger,
        },
        bad_input: if args.strict {
            BadInputPolicy::Strict
        } else if args.skip_invalid {
            BadInputPolicy::Skip
        } else {
            BadInputPolicy::Report
        },
        progress: ingest::progress::wanted(),
        max_line_bytes: args.max_line_bytes,
        spans,
        mapping,
        presets,
        // `analyze --partition` sets it; every other command reads every operation.
        partition: None,
        // `analyze` sets it; every other command holds every event.
        budget: None,
    })
}

/// The `--preset`s, each once. Envoy's and Istio's logs look alike (both are access logs), so
/// one run reads access logs with one of them.
fn presets(given: &[Preset]) -> Result<Vec<Preset>> {
    let mut presets: Vec<Preset> = Vec::new();
    for &p in given {
        if !presets.contains(&p) {
            presets.push(p);
        }
    }
    if presets.contains(&Preset::Envoy) && presets.contains(&Preset::Istio) {
        anyhow::bail!(
            "--preset envoy and --preset istio both read access logs and cannot tell them apart: give one (istio reads each inbound line as one attempt; envoy reads the attempt count of each line)"
        );
    }
    Ok(presets)
}

/// The input's key mapping: the policy's, then the flags'; `None` when there is none, so
/// that lines take the plain path.
fn key_mapping(
    args: &cli::InputOptions,
    rules: &Rules,
    policy: &policy::Policy,
) -> Result<Option<KeyMapping>> {
    let mut mapping = KeyMapping::default();
    mapping
        .add_fields("policy [fields]", policy.fields.clone())
        .map_err(anyhow::Error::msg)?;
    let fields = args
        .fields
        .iter()
        .map(|spec| {
            split_pair(
                "--field",
                spec,
                "OUR=THEIRS, e.g. --field operation_id=request_id",
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    mapping
        .add_fields("--field", fields)
        .map_err(anyhow::Error::msg)?;
    mapping
        .add_hop_values(
            "policy [hop_values]",
            policy.hop_values.clone(),
            &rules.hops,
        )
        .map_err(anyhow::Error::msg)?;
    let hop_values = args
        .hop_values
        .iter()
        .map(|spec| {
            spec.rsplit_once('=')
                .map(|(value, hop)| (value.to_string(), hop.to_string()))
                .with_context(|| {
                    format!("--hop-value {spec:?}: expected VALUE=HOP, e.g. --hop-value checkout-api=caller")
                })
        })
        .collect::<Result<Vec<_>>>()?;
    mapping
        .add_hop_values("--hop-value", hop_values, &rules.hops)
        .map_err(anyhow::Error::msg)?;
    mapping.attempt_base = args.attempt_base.or(policy.attempt_base).unwrap_or(1);
    if let Some(unit) = args.time_unit.as_deref().or(policy.time_unit.as_deref()) {
        mapping.time_unit = TimeUnit::parse(unit).with_context(|| {
            format!(
                "--time-unit {unit:?}: use one of {}, e.g. --time-unit s for epoch seconds",
                TimeUnit::all_names()
            )
        })?;
    }
    Ok((!mapping.is_plain()).then_some(mapping))
}

/// Parquet is binary: it goes to a file, or to stdout only when asked for with `-o -` and
/// stdout is not a terminal.
fn check_parquet_output(output: Option<&Path>) -> Result<()> {
    match output {
        None => anyhow::bail!(
            "--format parquet writes a binary file: add --output FILE, e.g. --output operations.parquet"
        ),
        Some(p) if p == Path::new("-") && std::io::stdout().is_terminal() => anyhow::bail!(
            "--format parquet will not write binary data to a terminal: use --output FILE, e.g. --output operations.parquet"
        ),
        Some(_) => Ok(()),
    }
}

/// The hop order and queue hops: defaults, then the policy file, then `--hops`.
fn base_rules(
    input: &cli::InputOptions,
    policy: &policy::Policy,
    policy_path: Option<&Path>,
) -> Result<Rules> {
    let hop_names = match (&input.hops, &policy.hops) {
        (Some(flag), _) => flag.clone(),
        (None, Some(from_policy)) => from_policy.clone(),
        (None, None) => rules::DEFAULT_HOPS.iter().map(|s| s.to_string()).collect(),
    };
    let mut rules = Rules::new(HopOrder::new(hop_names)?);
    // Checked here, before the policy's values are applied, so that a policy error names
    // the policy and its key, not the flag the value would otherwise have come from.
    if let Some(path) = policy_path {
        policy
            .check_hops(&rules.hops)
            .with_context(|| format!("invalid policy '{}'", path.display()))?;
    }
    if let Some(queues) = &policy.queue_hops {
        rules.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
    }
    Ok(rules)
}

/// Resolves the rules: defaults, then the policy file, then flags.
fn resolve_rules(args: &AnalyzeArgs, policy: &policy::Policy) -> Result<Rules> {
    let mut rules = base_rules(&args.input.options, policy, args.rules.policy.as_deref())?;
    apply_policy_rules(&mut rules, policy)?;
    rules.set_budgets(&args.rules.budget)?;
    rules.set_deadlines("--deadline", &args.rules.deadline)?;
    for (h, allowed) in rules
        .hop_flags("--allow-overlap", &args.rules.allow_overlap)?
        .into_iter()
        .enumerate()
    {
        rules.overlap_allowed[h] |= allowed;
    }
    let window = args.rules.burst_window.unwrap_or(rules.burst.window_ms);
    let min_ops = args.rules.burst_min_ops.unwrap_or(rules.burst.min_ops);
    if !rules::duration_is_valid(window) {
        anyhow::bail!(
            "--burst-window must be a positive number of milliseconds, e.g. --burst-window 50"
        );
    }
    if min_ops < rules::FEWEST_BURST_OPS {
        anyhow::bail!("--burst-min-ops must be at least {} (a burst spans several operations), e.g. --burst-min-ops 5", rules::FEWEST_BURST_OPS);
    }
    rules.burst.window_ms = window;
    rules.burst.min_ops = min_ops;
    Ok(rules)
}

/// The policy file's budgets, deadlines, hops allowed to overlap and burst parameters, over
/// `rules` (whose hop order and queue hops are already set).
fn apply_policy_rules(rules: &mut Rules, policy: &policy::Policy) -> Result<()> {
    let policy_budgets: Vec<String> = policy
        .budgets
        .iter()
        .map(|(hop, n)| format!("{hop}={n}"))
        .collect();
    rules
        .set_budgets(&policy_budgets)
        .context("in the policy's [budgets]")?;
    let policy_deadlines: Vec<String> = policy
        .deadlines
        .iter()
        .map(|(hop, ms)| format!("{hop}={ms}"))
        .collect();
    rules.set_deadlines("policy [deadlines]", &policy_deadlines)?;
    for (h, allowed) in rules
        .hop_flags("--allow-overlap", &policy.allow_overlap)?
        .into_iter()
        .enumerate()
    {
        rules.overlap_allowed[h] |= allowed;
    }
    if let Some(window) = policy.burst.window_ms {
        rules.burst.window_ms = window;
    }
    if let Some(min_ops) = policy.burst.min_ops {
        rules.burst.min_ops = min_ops;
    }
    Ok(())
}

fn analyze_config(args: AnalyzeArgs) -> Result<AnalyzeConfig> {
    let policy = match &args.rules.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    let rules = resolve_rules(&args, &policy)?;
    let policy_path = args.rules.policy.clone();
    analyze_config_with(args, &policy, policy_path.as_deref(), rules)
}

/// [`analyze_config`] with the policy read and the rules resolved.
fn analyze_config_with(
    args: AnalyzeArgs,
    policy: &policy::Policy,
    policy_path: Option<&Path>,
    rules: Rules,
) -> Result<AnalyzeConfig> {
    let AnalyzeArgs {
        input,
        partition,
        report,
        ..
    } = args;
    let parse_all = |texts: &[String], origin| -> Result<Vec<Condition>> {
        texts
            .iter()
            .map(|t| gate::condition::parse_condition(t, &rules.hops, origin))
            .collect()
    };
    let from_policy = parse_all(&policy.fail_on, Origin::Policy).with_context(|| {
        let path = policy_path.unwrap_or(Path::new("-"));
        format!("invalid policy '{}': fail_on", path.display())
    })?;
    let from_flags = parse_all(&report.fail_on, Origin::Flag).context("in --fail-on")?;
    if matches!(report.format, FormatArg::Parquet) {
        check_parquet_output(report.output.as_deref())?;
    }
    let output = OutputTarget::stdout_unless(report.output);
    let junit = report.junit.map(OutputTarget::from_flag);
    if output == OutputTarget::Stdout && junit == Some(OutputTarget::Stdout) {
        anyhow::bail!(
            "--junit - and the report would both go to standard output: give the report --output FILE, e.g. --junit - --output report.txt"
        );
    }
    let style = style(&report.style, &output);
    let mut input = input_config(input, &rules, policy)?;
    input.partition = partition;
    Ok(AnalyzeConfig {
        stderr_color: color_for(report.style.color, std::io::stderr().is_terminal()),
        style,
        input,
        format: match report.format {
            FormatArg::Table => OutputFormat::Table,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Jsonl => OutputFormat::Jsonl,
            FormatArg::Csv => OutputFormat::Csv,
            FormatArg::Markdown => OutputFormat::Markdown,
            FormatArg::Parquet => OutputFormat::Parquet,
            FormatArg::Html => OutputFormat::Html,
            FormatArg::Partial => OutputFormat::Partial,
        },
        output,
        top: report.top,
        gate: GateConfig {
            conditions: gate::condition::merge(from_policy, from_flags),
            report_only: report.report_only,
            allow_empty: report.allow_empty,
            junit,
        },
        rules,
    })
}

/// `show` resolves its rules exactly as `analyze` does, from the same flags and policy.
fn show_config(mut args: ShowArgs) -> Result<ShowConfig> {
    // `show trace.json`: a lone argument that names a file is the input, not an operation.
    // (`show ID -` reads an operation from stdin even where a file is named like it.)
    let operation_id = if args.input.files.is_empty() && Path::new(&args.operation_id).exists() {
        args.input.files.push(args.operation_id.into());
        None
    } else {
        Some(args.operation_id)
    };
    let resolved = analyze_config(AnalyzeArgs {
        input: args.input,
        rules: args.rules,
        partition: None,
        report: cli::ReportArgs {
            format: FormatArg::Table,
            output: None,
            fail_on: Vec::new(),
            report_only: false,
            allow_empty: false,
            junit: None,
            top: 0,
            style: args.style,
        },
    })?;
    Ok(ShowConfig {
        input: resolved.input,
        rules: resolved.rules,
        style: resolved.style,
        operation_id,
        test_run_id: args.run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cli::ColorArg::{Always, Auto, Never};
    use std::ffi::{c_char, c_void, CStr};

    extern "C" {
        /// Exported by mimalloc (v3) but not declared by libmimalloc-sys: writes every
        /// option as `option 'NAME': VALUE`.
        fn mi_options_print_out(out: libmimalloc_sys::mi_output_fun, arg: *mut c_void);
    }

    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: `arg` is the String passed below, alive for the call; `msg` is a C string.
        let out = unsafe { &mut *arg.cast::<String>() };
        out.push_str(&unsafe { CStr::from_ptr(msg) }.to_string_lossy());
    }

    #[test]
    fn partitions_purge_once_resident_memory_drifts_a_tenth_past_the_first() {
        let mut purge = PartitionPurge::default();
        assert!(
            !purge.purge_at(Some(200)),
            "the first partition sets the mark"
        );
        assert!(!purge.purge_at(Some(215)));
        assert!(!purge.purge_at(Some(220)));
        assert!(purge.purge_at(Some(221)));
        assert!(
            !purge.purge_at(Some(150)),
            "the mark stays the first partition's"
        );
        assert!(purge.purge_at(None), "unknown: every time");
        assert!(PartitionPurge::default().purge_at(None));
    }

    #[test]
    fn the_purge_delay_option_number_is_mimallocs_purge_delay() {
        const MARK: std::ffi::c_long = 7_654_321;
        let mut printed = String::new();
        // SAFETY: options are process-wide integers; `collect` only appends to `printed`,
        // which outlives the call.
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, MARK);
            mi_options_print_out(Some(collect), (&mut printed as *mut String).cast());
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        }
        assert!(
            printed.contains(&format!("option 'purge_delay': {MARK}")),
            "{printed}"
        );
    }

    #[test]
    fn color_follows_the_flag_then_no_color_then_clicolor_force_then_the_terminal() {
        let set = |v: &str| Some(std::ffi::OsString::from(v));
        let cases = [
            (Auto, true, None, None, true),
            (Auto, false, None, None, false),
            (Auto, true, set("1"), None, false),
            (Auto, true, set(""), None, true),
            (Auto, false, None, set("1"), true),
            (Auto, false, None, set("0"), false),
            (Auto, false, set("1"), set("1"), false),
            (Always, false, set("1"), None, true),
            (Never, true, None, set("1"), false),
        ];
        for (choice, terminal, no_color, force, expected) in cases {
            assert_eq!(
                wants_color(choice, terminal, no_color.clone(), force.clone()),
                expected,
                "{choice:?} terminal={terminal} NO_COLOR={no_color:?} CLICOLOR_FORCE={force:?}"
            );
        }
    }
}
