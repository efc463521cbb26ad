//! `generate`: synthetic attempt logs, and the classes they were made to have.

use anyhow::{Context, Result};

use crate::config::OutputTarget;
use crate::output::open_output;
use crate::{cli, exit_codes, generate};

/// `generate`: events to `--output` (or stdout), expected classes to `--expected`.
pub fn generate(args: cli::GenerateArgs) -> Result<i32> {
    let opts = generate::Options {
        ops: args.ops,
        seed: args.seed,
        mix: generate::Mix::parse(&args.mix)?,
    };
    let output = OutputTarget::stdout_unless(args.output);
    let expected = args.expected.map(OutputTarget::from_flag);
    if output == OutputTarget::Stdout && expected == Some(OutputTarget::Stdout) {
        anyhow::bail!(
            "--expected - and the events would both go to standard output: give the events --output FILE, e.g. -o events.jsonl --expected -"
        );
    }
    let out = open_output(&output)?;
    let expected = expected.as_ref().map(open_output).transpose()?;
    let stats =
        generate::generate(&opts, out, expected).context("could not write the generated events")?;
    eprintln!("{}", stats.summary());
    Ok(exit_codes::SUCCESS)
}
