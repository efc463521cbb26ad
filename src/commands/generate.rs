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
    let out = open_output(&output)?;
    let expected = expected.as_ref().map(open_output).transpose()?;
    let stats =
        generate::generate(&opts, out, expected).context("could not write the generated events")?;
    eprintln!("{}", stats.summary());
    Ok(exit_codes::SUCCESS)
}
