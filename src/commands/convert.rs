//! `convert`: the attempts read from any input, written as native JSON Lines records.

use anyhow::Result;

use crate::cli::ConvertArgs;
use crate::config::OutputTarget;
use crate::config::{base_rules, input_config};
use crate::output::{plural, write_output};
use crate::{convert, ingest, policy};

/// `convert`: read, normalize, write attempt records; bad input as for `analyze`.
pub fn convert(args: ConvertArgs) -> Result<i32> {
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
