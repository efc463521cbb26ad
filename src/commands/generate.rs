//! `generate`: synthetic attempt logs, and the classes they were made to have.

use anyhow::{Context, Result};

use crate::config::GenerateConfig;
use crate::output::open_output;
use crate::{cli, config, exit_codes, generate};

/// `generate`: events to `--output` (or stdout), expected classes to `--expected`.
pub fn generate(args: cli::GenerateArgs) -> Result<i32> {
    let GenerateConfig {
        options: opts,
        events: output,
        expected,
    } = config::generate(args)?;
    let (out, events_file) = open_output(&output)?;
    let (expected, expected_file) = match expected.as_ref().map(open_output).transpose()? {
        Some((writer, file)) => (Some(writer), Some(file)),
        None => (None, None),
    };
    let stats = generate::generate(&opts, out, expected).with_context(|| {
        format!(
            "could not write the generated events to {}",
            output.display()
        )
    })?;
    // Both complete (the writers flushed and dropped) before either is put in place.
    events_file.finish()?;
    if let Some(file) = expected_file {
        file.finish()?;
    }
    eprintln!("{}", stats.summary());
    Ok(exit_codes::SUCCESS)
}
