//! `merge`: partials from `analyze --format partial` → one report, gate and exit code.

use anyhow::{Context, Result};

use crate::cli::AnalyzeArgs;
use crate::cli::FormatArg;
use crate::cli::InputArgs;
use crate::config::AnalyzeConfig;
use crate::config::OutputTarget;
use crate::config::{analyze_config_with, check_policy_rules, input_paths};
use crate::ingest::InputPath;
use crate::output::{junit_on_error, report_run, RowsOut};
use crate::report::OutputFormat;
use crate::{analysis, cli, ingest, partial, policy, profile, summary};

/// `merge`: partials → the merged analysis → the same report, gate and exit code as one
/// `analyze` run over all their input.
pub fn merge(args: cli::MergeArgs) -> Result<i32> {
    let (junit, report_only) = (
        args.report.junit.clone().map(OutputTarget::from_flag),
        args.report.report_only,
    );
    junit_on_error(junit, report_only, merge_run(args))
}

pub fn merge_run(args: cli::MergeArgs) -> Result<i32> {
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
pub fn merge_config(args: cli::MergeArgs) -> Result<(AnalyzeConfig, Vec<partial::Partial>)> {
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
