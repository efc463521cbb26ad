//! Bad input: the one place that records bad lines (`path:line: what is wrong`) for every
//! reader and stage, applies the policy the user chose for them (report, `--strict`,
//! `--skip-invalid`), and prints them at the end of the run. Readers and stages only say
//! what is wrong and where; whether that stops the run is decided here.

use anyhow::{bail, Result};

use crate::exit_codes;
use crate::model::SourceRef;
use crate::words::{count, counted, noun};

/// Bad lines kept whole and printed one by one; the rest are only counted. A hostile input
/// can hold millions of bad lines (a small gzip can expand to tens of millions), and
/// their messages are not worth the memory.
pub const ISSUES_SHOWN: usize = 10;

/// What to do with a bad input line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BadInputPolicy {
    /// Report each, go on with the good lines, exit 2 at the end.
    Report,
    /// Stop at the first bad line.
    Strict,
    /// Report the count, keep the analysis exit code.
    Skip,
}

/// Lines that are not attempts (a mixed log's banners and health checks, a tool's other
/// records): passed by and counted, never an error, with where the first one is.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OtherLines {
    pub lines: u64,
    /// `path:line` of the first of them.
    pub example: Option<String>,
}

impl OtherLines {
    /// Adds the lines of another part of the input, read after this one.
    pub fn add(&mut self, later: &OtherLines) {
        self.lines += later.lines;
        if self.example.is_none() {
            self.example.clone_from(&later.example);
        }
    }
}

/// A bad input line, as `path:line: message`, or `path:line:column: message` where the
/// column is known (a JSON document that breaks off mid-line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputIssue {
    pub path: String,
    pub line: u64,
    pub column: Option<u64>,
    pub message: String,
}

impl std::fmt::Display for InputIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Both may quote the input: escaped, neither can act on the terminal nor forge a
        // message line of its own.
        let (path, message) = (
            crate::escape::terminal(&self.path),
            crate::escape::terminal(&self.message),
        );
        match self.column {
            Some(column) => write!(f, "{path}:{}:{column}: {message}", self.line),
            None => write!(f, "{path}:{}: {message}", self.line),
        }
    }
}

/// The bad lines of one run, in the order they were found (the first [`ISSUES_SHOWN`]
/// kept, all counted), and the policy for them.
#[derive(Debug)]
pub struct Diagnostics {
    policy: BadInputPolicy,
    issues: Vec<InputIssue>,
    total: u64,
}

impl Diagnostics {
    pub fn new(policy: BadInputPolicy) -> Diagnostics {
        Diagnostics {
            policy,
            issues: Vec::new(),
            total: 0,
        }
    }

    /// Records a bad line; under `--strict` it stops the run.
    pub fn bad_line(&mut self, path: &str, line: u64, message: String) -> Result<()> {
        self.bad_position(path, line, None, message)
    }

    /// Records a bad line with the column where it goes wrong, when known.
    pub fn bad_position(
        &mut self,
        path: &str,
        line: u64,
        column: Option<u64>,
        message: String,
    ) -> Result<()> {
        self.record(InputIssue {
            path: path.to_string(),
            line,
            column,
            message,
        })
    }

    /// Records problems found once lines were read (a span whose operation cannot be
    /// found, a finish without a start), in the order given; `files` names each
    /// [`SourceRef::file`].
    pub fn bad_sources(
        &mut self,
        files: &[String],
        problems: Vec<(SourceRef, String)>,
    ) -> Result<()> {
        let issues = problems
            .into_iter()
            .map(|(source, message)| InputIssue {
                path: files[source.file as usize].clone(),
                line: u64::from(source.line),
                column: None,
                message,
            })
            .collect();
        self.record_all(issues)
    }

    /// As [`Diagnostics::bad_sources`], sorted by file name and line first: the problems
    /// of operations analysed in parallel arrive in no useful order.
    pub fn bad_sources_in_file_order(
        &mut self,
        files: &[String],
        mut problems: Vec<(SourceRef, String)>,
    ) -> Result<()> {
        problems.sort_by(|(a, _), (b, _)| {
            (files[a.file as usize].as_str(), a.line)
                .cmp(&(files[b.file as usize].as_str(), b.line))
        });
        self.bad_sources(files, problems)
    }

    fn record_all(&mut self, issues: Vec<InputIssue>) -> Result<()> {
        for issue in issues {
            self.record(issue)?;
        }
        Ok(())
    }

    fn record(&mut self, issue: InputIssue) -> Result<()> {
        if self.policy == BadInputPolicy::Strict {
            bail!("{issue}\n(stopped at the first bad line because of --strict)");
        }
        self.total += 1;
        if self.issues.len() < ISSUES_SHOWN {
            self.issues.push(issue);
        }
        Ok(())
    }

    /// Bad lines another run recorded (a partition's, read back from its partial): the
    /// ones it kept are kept in order while there is room, and all of them are counted.
    pub fn add_recorded(&mut self, shown: &[InputIssue], total: u64) {
        let room = ISSUES_SHOWN.saturating_sub(self.issues.len());
        self.issues.extend(shown.iter().take(room).cloned());
        self.total += total;
    }

    pub fn policy(&self) -> BadInputPolicy {
        self.policy
    }

    /// The first [`ISSUES_SHOWN`] bad lines recorded so far.
    pub fn issues(&self) -> &[InputIssue] {
        &self.issues
    }

    /// Every bad line recorded so far, those not kept included.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The bad lines as printed: the first [`ISSUES_SHOWN`], then a count of the rest.
    pub fn shown_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.issues().iter().map(|i| i.to_string()).collect();
        let rest = self.total - self.issues.len() as u64;
        if rest > 0 {
            lines.push(format!(
                "… and {} more {}",
                count(rest),
                noun(rest, "bad line", "bad lines")
            ));
        }
        lines
    }

    /// `7 bad input lines: the verdict covers the good lines only` when the run failed on
    /// its input: bad lines that `--skip-invalid` did not accept.
    pub fn failure(&self) -> Option<String> {
        if self.total == 0 || self.policy == BadInputPolicy::Skip {
            return None;
        }
        Some(format!(
            "{}: the verdict covers the good lines only",
            self.counted()
        ))
    }

    /// `1 bad input line`, `7 bad input lines`.
    fn counted(&self) -> String {
        counted(self.total, "bad input line", "bad input lines")
    }

    /// Prints the bad lines to stderr and returns the exit code they call for.
    pub fn report(&self) -> i32 {
        if self.total == 0 {
            return exit_codes::SUCCESS;
        }
        if self.policy == BadInputPolicy::Skip {
            eprintln!(
                "attempt-funnel: skipped {} (--skip-invalid)",
                self.counted()
            );
            return exit_codes::SUCCESS;
        }
        for line in self.shown_lines() {
            eprintln!("{line}");
        }
        eprintln!(
            "attempt-funnel: {}; the report covers the good lines only (fix them, or pass --skip-invalid to accept this)",
            self.counted()
        );
        exit_codes::ERROR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(file: u32, line: u32) -> (SourceRef, String) {
        (
            SourceRef { file, line },
            format!("problem at {file}:{line}"),
        )
    }

    #[test]
    fn strict_stops_at_the_first_bad_line_and_names_it() {
        let mut d = Diagnostics::new(BadInputPolicy::Strict);
        let err = d.bad_line("a.jsonl", 7, "missing operation_id".into());
        let text = format!("{:#}", err.unwrap_err());
        assert!(
            text.starts_with("a.jsonl:7: missing operation_id\n"),
            "{text}"
        );
        assert!(text.contains("--strict"), "{text}");
        assert!(d.issues().is_empty());
    }

    #[test]
    fn problems_found_later_are_recorded_in_file_and_line_order() {
        let files = vec!["b".to_string(), "a".to_string()];
        let mut d = Diagnostics::new(BadInputPolicy::Report);
        d.bad_sources_in_file_order(&files, vec![source(0, 1), source(1, 9), source(1, 2)])
            .unwrap();
        let order: Vec<String> = d
            .issues()
            .iter()
            .map(|i| format!("{}:{}", i.path, i.line))
            .collect();
        assert_eq!(order, ["a:2", "a:9", "b:1"]);
    }

    #[test]
    fn only_the_first_bad_lines_are_kept_and_every_one_is_counted() {
        let mut d = Diagnostics::new(BadInputPolicy::Report);
        for line in 1..=1000 {
            d.bad_line("a", line, "bad".into()).unwrap();
        }
        assert_eq!(d.issues().len(), ISSUES_SHOWN);
        assert_eq!(d.issues()[9].line, 10);
        assert_eq!(d.total(), 1000);
    }

    #[test]
    fn the_exit_code_follows_the_policy() {
        for (policy, code) in [
            (BadInputPolicy::Report, exit_codes::ERROR),
            (BadInputPolicy::Skip, exit_codes::SUCCESS),
        ] {
            let mut d = Diagnostics::new(policy);
            assert_eq!(
                d.report(),
                exit_codes::SUCCESS,
                "{policy:?} without bad lines"
            );
            d.bad_line("a", 1, "bad".into()).unwrap();
            assert_eq!(d.report(), code, "{policy:?}");
        }
    }
}
