//! `diff`: two runs (attempt logs or saved summaries) compared.

use std::path::Path;

use anyhow::Result;

use crate::config::{AnalyzeConfig, DiffConfig};
use crate::ingest::InputPath;
use crate::output::{check_outputs, conclude, judge, junit_on_error, Report};
use crate::{analysis, cli, compare, config, ingest, model, partial, report, select, summary};

/// `diff`: two runs (attempt logs or saved summaries), the comparison report, and the gate
/// with change conditions.
pub fn diff(args: cli::DiffArgs) -> Result<i32> {
    let junit = config::junit_on_error(&args.report);
    junit_on_error(junit, config::diff(args).and_then(diff_run))
}

fn diff_run(diff: DiffConfig) -> Result<i32> {
    let DiffConfig {
        run: config,
        before,
        after,
        changes,
    } = diff;
    check_outputs(
        &[
            InputPath::File(before.clone()),
            InputPath::File(after.clone()),
        ],
        &config.outputs(),
    )?;
    let rules = &config.rules;
    let first = diff_side(&before, &config, &[])?;
    let worst: Vec<model::OperationKey> = first
        .analysis()
        .map(|a| a.kept.iter().map(|k| k.result.key.clone()).collect())
        .unwrap_or_default();
    let second = diff_side(&after, &config, &worst)?;
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
    let analyses: Vec<&analysis::Analysis> = [first.analysis(), second.analysis()]
        .into_iter()
        .flatten()
        .map(|c| &c.analysis)
        .collect();
    let failure = judge(&mut comparison.gate, &config, &analyses);
    let bytes = report::render_comparison(
        config.format,
        &comparison,
        first.analysis(),
        second.analysis(),
        rules,
        &config.style,
    )?;
    conclude(
        Report::Bytes(bytes),
        comparison.gate.as_ref(),
        failure.as_ref(),
        &config,
        &analyses,
    )
}

/// One side of `diff`, as read.
pub enum DiffSide {
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
pub fn diff_side(
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
