//! One module per command: each turns its flags into a configuration (`config`), runs the
//! pipeline, and hands the result to `output`.

pub mod analyze;
pub mod completions;
pub mod convert;
pub mod diff;
pub mod generate;
pub mod man;
pub mod merge;
pub mod replay;
pub mod show;
