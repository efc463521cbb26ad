//! The resolved, validated configuration of each subcommand: what the CLI asked for, in
//! the terms the pipeline uses. Nothing below this module sees clap types, and nothing
//! below `main` imports this module: each part is a type of the layer that uses it (the
//! rules, the input settings, the output format, the gate's conditions).

use std::path::PathBuf;

use crate::gate::condition::Condition;
use crate::ingest::InputConfig;
use crate::report::{OutputFormat, Style};
use crate::rules::Rules;

/// Where an output goes: standard output (no flag, or `-`), or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    Stdout,
    File(PathBuf),
}

impl OutputTarget {
    /// `--output`, `--junit`, `--expected`: `-` is standard output, everywhere.
    pub fn from_flag(path: PathBuf) -> OutputTarget {
        if path.as_os_str() == "-" {
            OutputTarget::Stdout
        } else {
            OutputTarget::File(path)
        }
    }

    /// An optional output flag whose absence means standard output.
    pub fn stdout_unless(path: Option<PathBuf>) -> OutputTarget {
        path.map_or(OutputTarget::Stdout, OutputTarget::from_flag)
    }

    pub fn display(&self) -> String {
        match self {
            OutputTarget::Stdout => "<stdout>".to_string(),
            OutputTarget::File(p) => p.display().to_string(),
        }
    }
}

/// The resolved configuration of `analyze`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub format: OutputFormat,
    pub output: OutputTarget,
    /// How the table format is drawn.
    pub style: Style,
    /// Colour the gate's verdict lines on stderr.
    pub stderr_color: bool,
    /// How many of the worst operations the summary lists.
    pub top: usize,
    pub gate: GateConfig,
}

/// The resolved configuration of `show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub style: Style,
    /// `None`: the input's only operation (`show trace.json`).
    pub operation_id: Option<String>,
    pub test_run_id: Option<String>,
}

/// The CI gate's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub conditions: Vec<Condition>,
    pub report_only: bool,
    /// `--junit`: where the JUnit XML goes, when asked for.
    pub junit: Option<OutputTarget>,
}
