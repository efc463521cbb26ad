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
mod group;
mod ingest;
mod model;
mod normalize;
mod report;
mod summary;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;

use crate::cli::{AnalyzeArgs, Cli, Command, FormatArg, InputArgs, InputFormatArg};
use crate::config::{
    AnalyzeConfig, BadInputPolicy, HopOrder, InputConfig, InputFormat, InputPath, OutputFormat,
    Rules,
};
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
    }
}

fn analyze(config: AnalyzeConfig) -> Result<i32> {
    let ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let analysis = analysis::analyze(ingested, &config.rules, config.input.bad_input)?;
    let summary = summary::summarize(&analysis, &config.rules, config.top)?;
    let bytes = report::render(config.format, &summary, &analysis, &config.rules)?;
    write_output(config.output.as_deref(), &bytes)?;
    Ok(report_issues(&analysis.issues, config.input.bad_input))
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
            if p == PathBuf::from("-") {
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

fn analyze_config(args: AnalyzeArgs) -> Result<AnalyzeConfig> {
    let hops = HopOrder::new(args.input.hops.clone())?;
    let mut rules = Rules::new(hops);
    rules.set_budgets(&args.budget)?;
    if !(args.burst_window.is_finite() && args.burst_window > 0.0) {
        anyhow::bail!(
            "--burst-window must be a positive number of milliseconds, e.g. --burst-window 50"
        );
    }
    if args.burst_min_ops < 2 {
        anyhow::bail!("--burst-min-ops must be at least 2 (a burst spans several operations), e.g. --burst-min-ops 5");
    }
    rules.burst.window_ms = args.burst_window;
    rules.burst.min_ops = args.burst_min_ops;
    Ok(AnalyzeConfig {
        input: input_config(args.input),
        rules,
        format: match args.format {
            FormatArg::Table => OutputFormat::Table,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Jsonl => OutputFormat::Jsonl,
            FormatArg::Csv => OutputFormat::Csv,
        },
        output: args.output,
        top: args.top,
    })
}
