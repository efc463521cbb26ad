//! `show`: one operation's attempt tree and timeline.

use anyhow::Result;

use crate::config::OutputTarget;
use crate::config::ShowConfig;
use crate::output::write_output;
use crate::{analysis, ingest, partial, report, select, summary};

/// `show` from its flags.
pub fn run(args: crate::cli::ShowArgs) -> Result<i32> {
    show(crate::config::show(args)?)
}

/// `show`: the whole pipeline (bursts look across operations), keeping one operation's
/// attempts, then its tree and timeline.
pub fn show(config: ShowConfig) -> Result<i32> {
    let ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let found = match &config.operation_id {
        Some(id) => select::find_operation(&ingested, id, config.test_run_id.as_deref()),
        None => select::only_operation(&ingested, config.test_run_id.as_deref()),
    };
    let op = found.inspect_err(|_| {
        // The bad lines first: the error that follows may point at them.
        ingested.diagnostics.report();
    })?;
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
