//! Where a command's output goes, and how a run that may gate ends: standard output or a
//! file, a reader that stops reading (`| head`), the per-operation rows written as the
//! merge makes them, the JUnit file, the gate's lines and duplicate events on stderr, and
//! the exit code they add up to.

use std::io::Write;

use anyhow::{Context, Result};

use crate::config::AnalyzeConfig;
use crate::config::{JunitOnError, OutputTarget};
use crate::ingest::InputPath;
use crate::{analysis, diagnostics, exit_codes, gate, profile, report, summary, words, writer};

/// Where the merge's rows go in `analyze` and `merge`: the gate's tally of the operations
/// behind each condition, and the per-operation writer when the report is one (its rows
/// are written as the merge makes them, never held whole).
pub struct RowsOut {
    blame: gate::Blame,
    rows: Option<report::RowWriter<ClosedPipe<Box<dyn Write>>>>,
    /// The file the rows go to, when it is a plain file: removed if the run fails before it
    /// is complete.
    file: Option<std::path::PathBuf>,
}

impl RowsOut {
    pub fn open(config: &AnalyzeConfig) -> Result<RowsOut> {
        // The rows are written while the inputs may still be read (a merge reads partial
        // files again): writing over one of them would destroy it mid-run.
        if let OutputTarget::File(out) = &config.output {
            let same = |input: &InputPath| match input {
                InputPath::File(p) => std::fs::canonicalize(p)
                    .ok()
                    .zip(std::fs::canonicalize(out).ok())
                    .is_some_and(|(a, b)| a == b),
                InputPath::Stdin => false,
            };
            if config.input.paths.iter().any(same) {
                anyhow::bail!(
                    "--output '{}' is also an input: the report would overwrite it while it is read; write it to another file",
                    out.display()
                );
            }
        }
        let rows = match report::row_format(config.format) {
            Some(format) => {
                let out = ClosedPipe {
                    inner: open_output(&config.output)?,
                    closed: false,
                };
                Some(report::RowWriter::new(format, &config.rules.hops, out)?)
            }
            None => None,
        };
        Ok(RowsOut {
            blame: gate::Blame::new(&config.gate.conditions, &config.rules.hops),
            // Only a file of our own making is removed on failure: `-o /dev/null` or a link
            // to a device or a pipe names something that is not the report's to delete
            // (as root, a failed run deleted the device).
            file: match (&rows, &config.output) {
                (Some(_), OutputTarget::File(path))
                    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) =>
                {
                    Some(path.clone())
                }
                _ => None,
            },
            rows,
        })
    }

    /// Runs an analysis with its rows sent here; a failed one leaves no partial row file.
    pub fn run(
        &mut self,
        analyse: impl FnOnce(&mut dyn analysis::tally::RowSink) -> Result<analysis::Analysis>,
    ) -> Result<analysis::Analysis> {
        let result = match &mut self.rows {
            Some(rows) => analyse(&mut analysis::tally::Both(&mut self.blame, rows)),
            None => analyse(&mut self.blame),
        };
        if result.is_err() {
            self.rows = None;
            if let Some(path) = self.file.take() {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }
}

/// The report, the gate and the exit code of an analysis (read and analysed, or merged),
/// whose rows went to `out`.
pub fn report_run(
    config: &AnalyzeConfig,
    analysis: analysis::Analysis,
    out: RowsOut,
    mut stages: profile::Stages,
) -> Result<i32> {
    let summary = summary::summarize(&analysis, &config.rules)?;
    stages.mark("summary");
    let mut verdict = (!config.gate.conditions.is_empty()).then(|| {
        gate::evaluate(
            &config.gate.conditions,
            &summary,
            &analysis.tally,
            &out.blame,
            &config.rules.hops,
            config.gate.report_only,
        )
    });
    let failure = judge(&mut verdict, config, &[&analysis]);
    let report = match out.rows {
        // Written as the merge made them: the last batch and the file's end remain.
        Some(rows) => Report::Written(
            rows.finish()
                .with_context(|| format!("could not write '{}'", config.output.display())),
        ),
        None => Report::Bytes(report::render(
            config.format,
            &summary,
            verdict.as_ref(),
            &config.style,
        )?),
    };
    let code = conclude(
        report,
        verdict.as_ref(),
        failure.as_ref(),
        config,
        &[&analysis],
    );
    stages.mark("report");
    code
}

/// A report to write: rendered whole, or per-operation rows already written.
pub enum Report {
    Bytes(Vec<u8>),
    Written(Result<()>),
}

/// Writes a report to `target`.
pub fn write_report(target: &OutputTarget, report: Report) -> Result<()> {
    match report {
        Report::Bytes(bytes) => write_output(target, &bytes),
        Report::Written(result) => result,
    }
}

/// A writer whose reader may stop reading (`| head`): the rest of the report is discarded
/// instead of failing the batch writers, whose errors do not all keep the I/O error's kind.
pub struct ClosedPipe<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> Write for ClosedPipe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.inner.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            _ if self.closed => Ok(()),
            other => other,
        }
    }
}

/// Why the run exits 2 on what it read, if it does: bad lines that `--skip-invalid` did not
/// accept, or no attempt at all (unless `--allow-empty`: a pipeline that lost its logs, or a
/// wrong `kubectl` selector, must not look like a healthy system; a `diff` needs both
/// sides). Decided once, before the report is rendered, and marked on the gate's verdict so
/// that every format, stderr and the JUnit file say the same.
pub fn judge(
    verdict: &mut Option<gate::GateReport>,
    config: &AnalyzeConfig,
    analyses: &[&analysis::Analysis],
) -> Option<gate::RunError> {
    let failure = analyses
        .iter()
        .find_map(|a| input_error(&a.diagnostics))
        .or_else(|| {
            let empty = analyses.iter().find(|a| a.tally.operations == 0)?;
            (!config.gate.allow_empty).then(|| no_attempts(empty))
        });
    if let (Some(verdict), Some(failure)) = (verdict.as_mut(), &failure) {
        verdict.mark_inconclusive(failure);
    }
    failure
}

/// What an input without a single attempt read: its files and lines.
fn no_attempts(analysis: &analysis::Analysis) -> gate::RunError {
    let files = match analysis.files.as_slice() {
        [] => "the input".to_string(),
        [one] => format!("'{one}'"),
        [first, rest @ ..] => format!(
            "'{first}' and {}",
            words::counted(rest.len() as u64, "other file", "other files")
        ),
    };
    let message = format!(
        "no attempts read from {files} ({}, none an attempt event)",
        words::counted(analysis.lines_read, "line", "lines")
    );
    gate::RunError {
        detail: format!("attempt-funnel: {message}; {NO_ATTEMPTS_FIX}"),
        message,
    }
}

/// The end of a run that may gate: the JUnit file, the report, the gate's lines, duplicate
/// events and bad input lines on stderr, and the exit code they add up to. `analyses`: the
/// runs read from input (both sides of a `diff`); `failure`: what [`judge`] found.
pub fn conclude(
    report: Report,
    verdict: Option<&gate::GateReport>,
    failure: Option<&gate::RunError>,
    config: &AnalyzeConfig,
    analyses: &[&analysis::Analysis],
) -> Result<i32> {
    // The JUnit file first: it must not depend on the report's reader (per-operation rows
    // were written as the merge made them, before the verdict existed).
    if let Some(target) = &config.gate.junit {
        // Written even without conditions, so that the CI step uploading it finds it.
        if verdict.is_none() {
            eprintln!(
                "attempt-funnel: --junit: no failure conditions (give --fail-on, or fail_on in the --policy file); '{}' has no test cases",
                target.display()
            );
        }
        let empty = gate::GateReport::without_conditions(config.gate.report_only);
        let xml = gate::junit_xml(verdict.unwrap_or(&empty), failure);
        ignore_closed_pipe(write_output(target, xml.as_bytes()))?;
    }
    // A closed stdout ends the report, not the run: the verdict and the exit code follow.
    let report_written = ignore_closed_pipe(write_report(&config.output, report));
    let mut code = exit_codes::SUCCESS;
    if let Some(report) = verdict {
        for line in gate::log_lines(report, config.stderr_color) {
            eprintln!("{line}");
        }
        if report.fails_run() {
            code = exit_codes::THRESHOLD_BREACHED;
        }
    }
    for analysis in analyses {
        if analysis.duplicate_events > 0 {
            eprintln!(
                "attempt-funnel: {} counted once ({}{})",
                plural(
                    analysis.duplicate_events,
                    "exact duplicate event",
                    "exact duplicate events"
                ),
                analysis.duplicate_examples.join(", "),
                if analysis.duplicate_events > analysis.duplicate_examples.len() as u64 {
                    ", …"
                } else {
                    ""
                }
            );
        }
        // An input error outranks a breach: the verdict was reached on incomplete input.
        code = code.max(analysis.diagnostics.report());
    }
    if let Some(failure) = failure {
        // Bad lines were printed above, by their diagnostics; an empty input says so here.
        if analyses
            .iter()
            .all(|a| input_error(&a.diagnostics).is_none())
        {
            eprintln!("{}", failure.detail);
        }
        code = exit_codes::ERROR;
    }
    report_written?;
    Ok(code)
}

/// A run that stopped on an error still writes its `--junit` file, saying so.
pub fn junit_on_error(junit: Option<JunitOnError>, result: Result<i32>) -> Result<i32> {
    result.inspect_err(|err| {
        if let Some(JunitOnError {
            target,
            report_only,
        }) = &junit
        {
            let failed = gate::RunError {
                message: "the run stopped on an error before the gate".to_string(),
                detail: format!("attempt-funnel: {err:#}"),
            };
            let xml = gate::junit_xml(
                &gate::GateReport::without_conditions(*report_only),
                Some(&failed),
            );
            // The error itself is what the run reports; a JUnit file that cannot be written
            // either adds nothing to it.
            let _ = write_output(target, xml.as_bytes());
        }
    })
}

/// How to accept a run over no attempts.
const NO_ATTEMPTS_FIX: &str =
    "check the input and the key mapping (--preset, --field), or pass --allow-empty if an empty input is fine";

/// The run failed on its input when it has bad lines that `--skip-invalid` did not accept:
/// the verdict covers the good lines only, and JUnit says so.
pub fn input_error(diagnostics: &diagnostics::Diagnostics) -> Option<gate::RunError> {
    diagnostics.failure().map(|message| gate::RunError {
        message,
        detail: diagnostics.shown_lines().join("\n"),
    })
}

/// A reader that stopped reading (`| head`) is not an error of the run.
pub fn ignore_closed_pipe(written: Result<()>) -> Result<()> {
    match written {
        Err(err) if is_broken_pipe(&err) => Ok(()),
        other => other,
    }
}

pub fn open_output(target: &OutputTarget) -> Result<Box<dyn Write>> {
    Ok(match target {
        OutputTarget::Stdout => Box::new(std::io::stdout().lock()),
        // Written on a thread of its own (see `writer`): a fresh file's pages cost the
        // kernel about as much as making the bytes.
        OutputTarget::File(p) => Box::new(
            writer::Behind::new(
                std::fs::File::create(p)
                    .with_context(|| format!("could not create '{}'", p.display()))?,
                format!("could not write '{}'", p.display()),
            )
            .with_context(|| format!("could not start writing '{}'", p.display()))?,
        ),
    })
}

pub fn write_output(target: &OutputTarget, bytes: &[u8]) -> Result<()> {
    match target {
        OutputTarget::File(p) => {
            std::fs::write(p, bytes).with_context(|| format!("could not write '{}'", p.display()))
        }
        OutputTarget::Stdout => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes)?;
            stdout.flush()?;
            Ok(())
        }
    }
}

pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// `1 exact duplicate event`, `7 exact duplicate events`.
pub fn plural(n: u64, singular: &str, plural: &str) -> String {
    words::counted(n, singular, plural)
}
