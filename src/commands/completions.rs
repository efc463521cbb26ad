//! `completions SHELL`: a shell completion script, generated from the clap definitions.

use anyhow::Result;

use crate::cli::{Cli, CompletionsArgs};
use crate::config::OutputTarget;
use crate::exit_codes;
use crate::output::write_output;

pub fn completions(args: CompletionsArgs) -> Result<i32> {
    // Into a buffer first: clap_complete panics on a write error such as a closed
    // pipe; write_output reports it instead.
    let mut script = Vec::new();
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(args.shell, &mut command, "attempt-funnel", &mut script);
    write_output(&OutputTarget::Stdout, &script)?;
    Ok(exit_codes::SUCCESS)
}
