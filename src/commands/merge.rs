//! `merge`: partials from `analyze --format partial` → one report, gate and exit code.

use anyhow::{Context, Result};

use crate::config::{AnalyzeConfig, OutputTarget};
use crate::ingest::InputPath;
use crate::output::{check_outputs, junit_on_error, report_run, RowsOut};
use crate::{analysis, cli, config, ingest, partial, profile, summary};

/// `merge`: partials → the merged analysis → the same report, gate and exit code as one
/// `analyze` run over all their input.
pub fn merge(args: cli::MergeArgs) -> Result<i32> {
    let junit = config::junit_on_error(&args.report);
    junit_on_error(junit, merge_run(args))
}

pub fn merge_run(args: cli::MergeArgs) -> Result<i32> {
    let mut stages = profile::Stages::from_env();
    let allow_missing = args.allow_missing;
    let (config, parts) = merge_config(args)?;
    let incomplete = partial::merge::check_set(&parts, allow_missing)?;
    if let Some(incomplete) = &incomplete {
        eprintln!(
            "attempt-funnel: merging {} (--allow-missing): the report covers only these",
            incomplete.describe()
        );
    }
    stages.mark("read partials");
    let worst = analysis::Worst {
        listed: config.top,
        drawn: config.top.min(summary::TIMELINES_DRAWN),
    };
    let mut out = RowsOut::open(&config)?;
    let analysis = out.run(|sink| partial::merge(parts, &config.rules, worst, sink));
    stages.mark("merge");
    let analysis = analysis.map(|a| analysis::Analysis { incomplete, ..a });
    report_run(&config, analysis?, out, stages)
}

/// Reads the partials and resolves the merge's configuration: the rules are those the
/// partials were made with (the first one's; the merge refuses others).
fn merge_config(args: cli::MergeArgs) -> Result<(AnalyzeConfig, Vec<partial::Partial>)> {
    let output = OutputTarget::stdout_unless(args.report.output.clone());
    let junit = args.report.junit.clone().map(OutputTarget::from_flag);
    let merge = config::merge(args)?;
    check_outputs(
        &merge.partials,
        &[("--output", Some(&output)), ("--junit", junit.as_ref())],
    )?;
    let parts = read_partials(&merge.partials)?;
    let first = &parts[0];
    let rules = first
        .rules
        .rules()
        .with_context(|| format!("invalid partial '{}'", first.origin))?;
    let config = merge.with_rules(rules, &first.origin)?;
    Ok((config, parts))
}

/// Every partial in the inputs, in order (a stream may hold several).
pub fn read_partials(paths: &[InputPath]) -> Result<Vec<partial::Partial>> {
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
