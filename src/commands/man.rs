//! `man DIR`: the man pages, generated from the clap definitions.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::Cli;
use crate::exit_codes;

/// `man DIR`: the man pages, generated from the clap definitions.
pub fn man(dir: &Path) -> Result<i32> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("could not create '{}'", dir.display()))?;
    let command = <Cli as clap::CommandFactory>::command();
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("could not write the man pages to '{}'", dir.display()))?;
    eprintln!(
        "attempt-funnel: man pages written to '{}' (read one with: man {}/attempt-funnel.1)",
        dir.display(),
        dir.display()
    );
    Ok(exit_codes::SUCCESS)
}
