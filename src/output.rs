//! Where a command's output goes, and how a run that may gate ends: standard output or a
//! file, a reader that stops reading (`| head`), the per-operation rows written as the
//! merge makes them, the JUnit file, the gate's lines and duplicate events on stderr, and
//! the exit code they add up to.

use std::io::Write;

use anyhow::{Context, Result};

use crate::atomic::AtomicFile;
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
    /// The file the rows go to, put in place once they are all written.
    unfinished: Unfinished,
}

impl RowsOut {
    pub fn open(config: &AnalyzeConfig) -> Result<RowsOut> {
        let (rows, unfinished) = match report::row_format(config.format) {
            Some(format) => {
                let (writer, unfinished) = open_output(&config.output)?;
                let out = ClosedPipe {
                    inner: writer,
                    closed: false,
                    named: named(&config.output),
                };
                let rows = report::RowWriter::new(format, &config.rules.hops, out)?;
                (Some(rows), unfinished)
            }
            None => (None, Unfinished::default()),
        };
        Ok(RowsOut {
            blame: gate::Blame::new(&config.gate.conditions, &config.rules.hops),
            rows,
            unfinished,
        })
    }

    /// Runs an analysis with its rows sent here; a failed one leaves no partial row file
    /// (and an earlier file at the output's path as it was).
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
            self.unfinished = Unfinished::default();
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
            // Its write errors name the output already (`ClosedPipe`).
            rows.finish().and_then(|()| out.unfinished.finish()),
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

/// An output flag that names one of the run's inputs: refused before anything is read,
/// as writing it would destroy that input. `junit_on_error` writes no JUnit file over it.
#[derive(Debug)]
pub struct OutputIsInput {
    pub flag: &'static str,
    pub output: std::path::PathBuf,
    pub input: String,
}

impl std::fmt::Display for OutputIsInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let same = if self.input == self.output.display().to_string() {
            String::new()
        } else {
            format!(" ('{}', the same file)", self.input)
        };
        write!(
            f,
            "{} '{}' is also an input{same}: writing it would destroy what the run reads; write to another file",
            self.flag,
            self.output.display()
        )
    }
}

impl std::error::Error for OutputIsInput {}

/// Refuses, before anything is read, outputs that cannot be written: standard output
/// closed, or any of `outputs` (each with its flag) that is one of the files `inputs` name
/// (directories and patterns expanded) — the same file by device and inode, so a hard link
/// to an input or another spelling of its path is caught too. Inputs that cannot be
/// resolved are left for the reading to report.
pub fn check_outputs(
    inputs: &[InputPath],
    outputs: &[(&'static str, Option<&OutputTarget>)],
) -> Result<()> {
    if outputs
        .iter()
        .any(|(_, t)| *t == Some(&OutputTarget::Stdout))
    {
        refuse_closed_stdout()?;
    }
    let outputs: Vec<(&'static str, &std::path::Path, FileId)> = outputs
        .iter()
        .filter_map(|&(flag, target)| match target? {
            OutputTarget::File(p) => Some((flag, p.as_path(), file_id(p)?)),
            OutputTarget::Stdout => None,
        })
        .collect();
    if outputs.is_empty() {
        return Ok(());
    }
    let Ok(resolved) = crate::ingest::source::resolve(inputs) else {
        return Ok(());
    };
    for input in &resolved.inputs {
        let Some(id) = input.path().and_then(file_id) else {
            continue;
        };
        if let Some(&(flag, output, _)) = outputs.iter().find(|(_, _, o)| *o == id) {
            return Err(OutputIsInput {
                flag,
                output: output.to_path_buf(),
                input: input.name.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// What makes two paths one file: its device and inode (elsewhere, its canonical path).
#[cfg(unix)]
type FileId = (u64, u64);
#[cfg(not(unix))]
type FileId = std::path::PathBuf;

/// The file `path` names, when it exists and is a regular file (a device such as
/// `/dev/null` may be named as both input and output).
fn file_id(path: &std::path::Path) -> Option<FileId> {
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        std::fs::canonicalize(path).ok()
    }
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
/// Its other errors name the output (`named`): they come back through the analysis and
/// the row writers, far from where it was opened.
pub struct ClosedPipe<W> {
    inner: W,
    closed: bool,
    named: String,
}

impl<W> ClosedPipe<W> {
    fn named(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("could not write {}: {e}", self.named))
    }
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
            other => other.map_err(|e| self.named(e)),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            _ if self.closed => Ok(()),
            other => other.map_err(|e| self.named(e)),
        }
    }
}

/// Why the run exits 2 on what it read, if it does: bad lines that `--skip-invalid` did not
/// accept, or no attempt at all (unless `--allow-empty`: a pipeline that lost its logs, or a
/// wrong `kubectl` selector, must not look like a healthy system; a `diff` needs both
/// sides). One partition of `--partition K/N` may own no operation at all, so there the
/// merge of the set judges emptiness, not the partition. Decided once, before the report is rendered, and marked on the gate's verdict so
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
            let partitioned = config.input.partition.is_some_and(|p| p.count > 1);
            (!config.gate.allow_empty && !partitioned).then(|| no_attempts(empty))
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
            // Refused because the JUnit file is an input: it is not written over it.
            if let Some(refused) = err.downcast_ref::<OutputIsInput>() {
                if *target == OutputTarget::File(refused.output.clone()) {
                    return;
                }
            }
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

/// A file output not yet in place: [`Unfinished::finish`] puts it there once its writer is
/// flushed and dropped; dropped instead, it leaves no file (and an earlier one at its path as
/// it was). Standard output (or a device) has nothing to put in place.
#[derive(Debug, Default)]
pub struct Unfinished(Option<AtomicFile>);

impl Unfinished {
    pub fn finish(self) -> Result<()> {
        self.0.map_or(Ok(()), AtomicFile::commit)
    }
}

/// A writer to `target`, and what puts it in place when written. A file is written whole or
/// not at all (see `atomic`), on a thread of its own (see `writer`): a fresh file's pages
/// cost the kernel about as much as making the bytes.
pub fn open_output(target: &OutputTarget) -> Result<(Box<dyn Write>, Unfinished)> {
    Ok(match target {
        OutputTarget::Stdout => {
            refuse_closed_stdout()?;
            (Box::new(std::io::stdout().lock()), Unfinished(None))
        }
        OutputTarget::File(p) => {
            let file = AtomicFile::create(p)?;
            let writer = writer::Behind::new(file.writer()?)
                .with_context(|| format!("could not start writing '{}'", p.display()))?;
            (Box::new(writer), Unfinished(Some(file)))
        }
    })
}

/// Writes `target` through `write`, buffered, and puts it in place when complete.
pub fn write_with(
    target: &OutputTarget,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let (writer, unfinished) = open_output(target)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, writer);
    write(&mut out)?;
    out.flush().map_err(|e| write_error(target, e))?;
    // The file's writing thread is done with it before it is put in place.
    drop(out);
    unfinished.finish()
}

/// `bytes` to `target`, whole or not at all.
pub fn write_output(target: &OutputTarget, bytes: &[u8]) -> Result<()> {
    write_with(target, |out| {
        out.write_all(bytes).map_err(|e| write_error(target, e))
    })
}

/// A write to `target` that failed, naming it once.
fn write_error(target: &OutputTarget, e: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context(format!("could not write {}", named(target)))
}

/// `standard output`, or the file's name quoted: what a message says it could not write.
fn named(target: &OutputTarget) -> String {
    match target {
        OutputTarget::Stdout => "standard output".to_string(),
        OutputTarget::File(p) => format!("'{}'", p.display()),
    }
}

/// An error when standard output was closed when the run started (`>&-`): what is written
/// to it would be lost without a word.
fn refuse_closed_stdout() -> Result<()> {
    if stdout_closed::at_start() {
        anyhow::bail!(
            "standard output is closed, so the output would be lost: redirect it (> FILE), or name a file with -o"
        );
    }
    Ok(())
}

/// Whether standard output was closed when the process started. The Rust runtime opens
/// `/dev/null` in place of a closed standard descriptor before `main`, after which every
/// write to it succeeds; so it is looked at before the runtime starts, by a function the
/// loader calls first (`.init_array` on Linux, `__mod_init_func` on macOS). Elsewhere it
/// is never taken for closed.
mod stdout_closed {
    use std::sync::atomic::{AtomicBool, Ordering};

    static CLOSED: AtomicBool = AtomicBool::new(false);

    pub fn at_start() -> bool {
        CLOSED.load(Ordering::Relaxed)
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    #[used]
    #[cfg_attr(target_os = "linux", unsafe(link_section = ".init_array"))]
    #[cfg_attr(target_os = "macos", unsafe(link_section = "__DATA,__mod_init_func"))]
    static LOOK_BEFORE_MAIN: extern "C" fn() = look;

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    extern "C" fn look() {
        // SAFETY: F_GETFD reads the descriptor's flags and changes nothing; it fails (EBADF)
        // only when descriptor 1 is not open.
        if unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1 {
            CLOSED.store(true, Ordering::Relaxed);
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
