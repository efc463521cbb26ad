//! `replay`: the observed run and the run replayed under a candidate policy, compared.

use anyhow::Result;

use crate::config::ReplayConfig;
use crate::output::{check_outputs, conclude, judge, junit_on_error, Report};
use crate::{analysis, cli, compare, config, ingest, partial, replay, report, select, summary};

/// `replay`: the observed run and the same run replayed under the candidate, through the
/// same analysis; the comparison report; the gate on the replayed run.
pub fn replay(args: cli::ReplayArgs) -> Result<i32> {
    let junit = config::junit_on_error(&args.analyze.report);
    junit_on_error(junit, config::replay(args).and_then(replay_run))
}

fn replay_run(replay: ReplayConfig) -> Result<i32> {
    let ReplayConfig {
        run: config,
        candidate: candidate_path,
        seed,
        changes,
    } = replay;
    let mut inputs = config.input.paths.clone();
    inputs.push(ingest::InputPath::File(candidate_path.clone()));
    check_outputs(&inputs, &config.outputs())?;
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
    let failure = judge(&mut comparison.gate, &config, &[&observed]);
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
        failure.as_ref(),
        &config,
        &[&observed],
    )
}
