//! attempt-funnel: reads attempt events, rebuilds each logical operation's attempt tree,
//! and tells where one request became many, and why.
//!
//! Pipeline: ingest → normalize → group → classify → summary → report (→ gate).

mod analysis;
mod burst;
mod classify;
mod cli;
mod config;
mod exit_codes;
mod gate;
mod group;
mod ingest;
mod model;
mod normalize;
mod policy;
mod report;
mod select;
mod summary;
mod timeline;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::Parser;

use crate::cli::{AnalyzeArgs, Cli, Command, FormatArg, InputArgs, InputFormatArg, ShowArgs};
use crate::config::{
    AnalyzeConfig, BadInputPolicy, GateConfig, HopOrder, InputConfig, InputFormat, InputPath,
    OutputFormat, Rules, ShowConfig,
};
use crate::gate::Origin;
use crate::ingest::InputIssue;

/// Bad lines printed one by one before the rest are only counted.
const ISSUES_SHOWN: usize = 10;

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => exit_codes::SUCCESS,
        Err(err) => {
            eprintln!("attempt-funnel: {err:#}");
            exit_codes::ERROR
        }
    };
    std::process::exit(code);
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Analyze(args) => analyze(analyze_config(args)?),
        Command::Show(args) => show(show_config(args)?),
    }
}

fn analyze(config: AnalyzeConfig) -> Result<i32> {
    let ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    // The worst operations keep their attempts for the timelines.
    let keep = analysis::Keep::Worst(config.top.min(summary::TIMELINES_DRAWN));
    let analysis = analysis::analyze(ingested, &config.rules, config.input.bad_input, &keep)?;
    let mut summary = summary::summarize(&analysis, &config.rules, config.top)?;
    if !config.gate.conditions.is_empty() {
        summary.gate = Some(gate::evaluate(
            &config.gate.conditions,
            &summary,
            &analysis,
            &config.rules.hops,
            config.gate.report_only,
        ));
    }
    let bytes = report::render(config.format, &summary, &analysis, &config.rules)?;
    write_output(config.output.as_deref(), &bytes)?;
    let mut code = exit_codes::SUCCESS;
    if let Some(report) = &summary.gate {
        if let Some(path) = &config.gate.junit {
            std::fs::write(path, gate::junit_xml(report))
                .with_context(|| format!("could not write '{}'", path.display()))?;
        }
        for line in gate::log_lines(report) {
            eprintln!("{line}");
        }
        if !report.passed && !report.report_only {
            code = exit_codes::THRESHOLD_BREACHED;
        }
    }
    if analysis.duplicate_events > 0 {
        eprintln!(
            "attempt-funnel: {} exact duplicate events counted once ({}{})",
            analysis.duplicate_events,
            analysis.duplicate_examples.join(", "),
            if analysis.duplicate_events > analysis.duplicate_examples.len() as u64 {
                ", …"
            } else {
                ""
            }
        );
    }
    let input_code = report_issues(&analysis.issues, config.input.bad_input);
    // An input error outranks a breach: the verdict was reached on incomplete input.
    Ok(code.max(input_code))
}

/// `show`: the whole pipeline (bursts look across operations), keeping one operation's
/// attempts, then its tree and timeline.
fn show(config: ShowConfig) -> Result<i32> {
    let ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let op = select::find_operation(
        &ingested,
        &config.operation_id,
        config.test_run_id.as_deref(),
    )?;
    let keep = analysis::Keep::Operations(vec![op]);
    let analysis = analysis::analyze(ingested, &config.rules, config.input.bad_input, &keep)?;
    let input_code = report_issues(&analysis.issues, config.input.bad_input);
    let Some(view) = summary::operation_view(&analysis, &config.rules) else {
        anyhow::bail!(
            "operation \"{}\" has no valid attempts: every event of it was a bad line (see above)",
            config.operation_id
        );
    };
    write_output(None, report::show(&view).as_bytes())?;
    Ok(input_code)
}

/// Prints bad input lines to stderr and returns the exit code they call for.
fn report_issues(issues: &[InputIssue], policy: BadInputPolicy) -> i32 {
    if issues.is_empty() {
        return exit_codes::SUCCESS;
    }
    if policy == BadInputPolicy::Skip {
        eprintln!(
            "attempt-funnel: skipped {} bad input lines (--skip-invalid)",
            issues.len()
        );
        return exit_codes::SUCCESS;
    }
    for issue in issues.iter().take(ISSUES_SHOWN) {
        eprintln!("{issue}");
    }
    if issues.len() > ISSUES_SHOWN {
        eprintln!("… and {} more bad lines", issues.len() - ISSUES_SHOWN);
    }
    eprintln!(
        "attempt-funnel: {} bad input lines; the report covers the good lines only (fix them, or pass --skip-invalid to accept this)",
        issues.len()
    );
    exit_codes::ERROR
}

fn write_output(path: Option<&Path>, bytes: &[u8]) -> Result<()> {
    match path {
        Some(p) if p != Path::new("-") => {
            std::fs::write(p, bytes).with_context(|| format!("could not write '{}'", p.display()))
        }
        _ => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
            Ok(())
        }
    }
}

fn input_config(args: InputArgs) -> InputConfig {
    let mut paths: Vec<InputPath> = args
        .files
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
    InputConfig {
        paths,
        format: match args.input_format {
            InputFormatArg::Auto => InputFormat::Auto,
            InputFormatArg::Jsonl => InputFormat::Jsonl,
            InputFormatArg::Logfmt => InputFormat::Logfmt,
        },
        bad_input: if args.strict {
            BadInputPolicy::Strict
        } else if args.skip_invalid {
            BadInputPolicy::Skip
        } else {
            BadInputPolicy::Report
        },
    }
}

/// Resolves the rules: defaults, then the policy file, then flags.
fn resolve_rules(args: &AnalyzeArgs, policy: &policy::Policy) -> Result<Rules> {
    let hop_names = match (&args.input.hops, &policy.hops) {
        (Some(flag), _) => flag.clone(),
        (None, Some(from_policy)) => from_policy.clone(),
        (None, None) => config::DEFAULT_HOPS.iter().map(|s| s.to_string()).collect(),
    };
    let mut rules = Rules::new(HopOrder::new(hop_names)?);
    let policy_budgets: Vec<String> = policy
        .budgets
        .iter()
        .map(|(hop, n)| format!("{hop}={n}"))
        .collect();
    rules
        .set_budgets(&policy_budgets)
        .context("in the policy's [budgets]")?;
    rules.set_budgets(&args.budget)?;
    if let Some(queues) = &policy.queue_hops {
        rules.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
    }
    let overlap_hops: Vec<String> = policy
        .allow_overlap
        .iter()
        .chain(&args.allow_overlap)
        .cloned()
        .collect();
    rules.overlap_allowed = rules.hop_flags("--allow-overlap", &overlap_hops)?;
    let window = args
        .burst_window
        .or(policy.burst.window_ms)
        .unwrap_or(config::DEFAULT_BURST_WINDOW_MS);
    let min_ops = args
        .burst_min_ops
        .or(policy.burst.min_ops)
        .unwrap_or(config::DEFAULT_BURST_MIN_OPS);
    if !(window.is_finite() && window > 0.0) {
        anyhow::bail!(
            "--burst-window must be a positive number of milliseconds, e.g. --burst-window 50"
        );
    }
    if min_ops < 2 {
        anyhow::bail!("--burst-min-ops must be at least 2 (a burst spans several operations), e.g. --burst-min-ops 5");
    }
    rules.burst.window_ms = window;
    rules.burst.min_ops = min_ops;
    Ok(rules)
}

fn analyze_config(args: AnalyzeArgs) -> Result<AnalyzeConfig> {
    let policy = match &args.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    let rules = resolve_rules(&args, &policy)?;
    let parse_all = |texts: &[String], origin| -> Result<Vec<gate::Condition>> {
        texts
            .iter()
            .map(|t| gate::parse_condition(t, &rules.hops, origin))
            .collect()
    };
    let from_policy =
        parse_all(&policy.fail_on, Origin::Policy).context("in the policy's fail_on")?;
    let from_flags = parse_all(&args.fail_on, Origin::Flag).context("in --fail-on")?;
    Ok(AnalyzeConfig {
        input: input_config(args.input),
        format: match args.format {
            FormatArg::Table => OutputFormat::Table,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Jsonl => OutputFormat::Jsonl,
            FormatArg::Csv => OutputFormat::Csv,
            FormatArg::Markdown => OutputFormat::Markdown,
            FormatArg::Html => OutputFormat::Html,
        },
        output: args.output,
        top: args.top,
        gate: GateConfig {
            conditions: gate::merge(from_policy, from_flags),
            report_only: args.report_only,
            junit: args.junit,
        },
        rules,
    })
}

/// `show` resolves its rules exactly as `analyze` does, from the same flags and policy.
fn show_config(args: ShowArgs) -> Result<ShowConfig> {
    let resolved = analyze_config(AnalyzeArgs {
        input: args.input,
        format: FormatArg::Table,
        output: None,
        budget: args.budget,
        allow_overlap: args.allow_overlap,
        burst_window: args.burst_window,
        burst_min_ops: args.burst_min_ops,
        fail_on: Vec::new(),
        policy: args.policy,
        report_only: false,
        junit: None,
        top: 0,
    })?;
    Ok(ShowConfig {
        input: resolved.input,
        rules: resolved.rules,
        operation_id: args.operation_id,
        test_run_id: args.run,
    })
}
