//! The resolved, validated configuration of each subcommand: what the CLI asked for, in
//! the terms the pipeline uses. Nothing below this module sees clap types, and nothing
//! below `main` imports this module: each part is a type of the layer that uses it (the
//! rules, the input settings, the output format, the gate's conditions).

use std::path::PathBuf;

use crate::gate::condition::Condition;
use crate::ingest::InputConfig;
use crate::report::OutputFormat;
use crate::rules::Rules;

/// The resolved configuration of `analyze`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    /// How many of the worst operations the summary lists.
    pub top: usize,
    pub gate: GateConfig,
}

/// The resolved configuration of `show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub operation_id: String,
    pub test_run_id: Option<String>,
}

/// The CI gate's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub conditions: Vec<Condition>,
    pub report_only: bool,
    pub junit: Option<PathBuf>,
}
