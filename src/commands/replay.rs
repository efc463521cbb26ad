//! `replay`: the observed run and the run replayed under a candidate policy, compared.

use anyhow::Result;

use crate::config::OutputTarget;
use crate::config::{analyze_config, change_conditions, hops_for};
use crate::output::{conclude, junit_on_error, Report};
use crate::{analysis, cli, compare, ingest, partial, replay, report, select, summary};

/// `replay`: the observed run and the same run replayed under the candidate, through the
/// same analysis; the comparison report; the gate on the replayed run.
pub fn replay(args: cli::ReplayArgs) -> Result<i32> {
    let report = &args.analyze.report;
    let (junit, report_only) = (
        report.junit.clone().map(OutputTarget::from_flag),
        report.report_only,
    );
    junit_on_error(junit, report_only, replay_run(args))
}

pub fn replay_run(mut args: cli::ReplayArgs) -> Result<i32> {
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
