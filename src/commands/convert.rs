//! `convert`: the attempts read from any input, written as native JSON Lines records.

use anyhow::Result;

use crate::cli::ConvertArgs;
use crate::config::ConvertConfig;
use crate::output::{check_outputs, plural, write_output};
use crate::{config, convert, ingest};

/// `convert`: read, normalize, write attempt records; bad input as for `analyze`.
pub fn convert(args: ConvertArgs) -> Result<i32> {
    let ConvertConfig {
        input,
        hops,
        output,
    } = config::convert(args)?;
    check_outputs(&input.paths, &[("--output", Some(&output))])?;
    let ingested = ingest::read_inputs(&input, &hops)?;
    let converted = convert::convert(ingested, &hops)?;
    write_output(&output, &converted.bytes)?;
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
