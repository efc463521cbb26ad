//! `man DIR`: the man pages, generated from the clap definitions.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::Cli;
use crate::config::OutputTarget;
use crate::exit_codes;
use crate::output::write_with;

/// `man DIR`: the man pages, generated from the clap definitions.
pub fn man(dir: &Path) -> Result<i32> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("could not create '{}'", dir.display()))?;
    let mut command = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    command.build();
    write_pages(command, dir)?;
    eprintln!(
        "attempt-funnel: man pages written to '{}' (read one with: man {}/attempt-funnel.1)",
        dir.display(),
        dir.display()
    );
    Ok(exit_codes::SUCCESS)
}

/// The page of `command` and of each of its visible subcommands, as `clap_mangen`'s
/// `generate_to` names them, each written whole or not at all (see `crate::atomic`).
fn write_pages(command: clap::Command, dir: &Path) -> Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let page = clap_mangen::Man::new(command);
    let target = OutputTarget::File(dir.join(page.get_filename()));
    write_with(&target, |out| {
        page.render(out)
            .with_context(|| format!("could not write the man pages to '{}'", dir.display()))
    })
}
