//! The progress line on stderr while inputs are read: bytes read (of the total, when every
//! input's size is known), events and operations so far, redrawn in place with `\r`.
//!
//! It is shown only when stderr is a terminal and the run is not under CI, only once a run
//! has lasted [`FIRST_DRAW_AFTER`], and at most every [`REDRAW_EVERY`]; it is cleared when
//! reading ends. Ingest calls [`Progress::update`] once per chunk (or per Parquet slice),
//! never per line, and counts bytes with one relaxed atomic add per read call, so a hidden
//! progress line costs nothing measurable.

use std::ffi::OsStr;
use std::io::{self, IsTerminal, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::words::counted;

/// No line before a run has lasted this long: short runs (the usual case) print nothing.
pub const FIRST_DRAW_AFTER: Duration = Duration::from_millis(500);

/// Fewest time between two redraws: about ten a second is smooth to read and costs nothing.
pub const REDRAW_EVERY: Duration = Duration::from_millis(100);

/// Whether this run shows a progress line: stderr is a terminal and the `CI` environment
/// variable does not say we run under CI.
pub fn wanted() -> bool {
    should_show(
        io::stderr().is_terminal(),
        std::env::var_os("CI").as_deref(),
    )
}

/// The decision of [`wanted`], apart from the process state so that it can be tested. CI
/// services set `CI` (GitHub Actions, GitLab, CircleCI, Buildkite, …); `CI=false` or `CI=0`
/// opts back in.
pub fn should_show(stderr_is_terminal: bool, ci: Option<&OsStr>) -> bool {
    let under_ci = ci.is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    stderr_is_terminal && !under_ci
}

/// Bytes read, counted by whichever thread reads them: the inputs' raw bytes (before
/// decompression), shared by every reader of a run, or the text they gave.
#[derive(Debug, Clone, Default)]
pub struct ByteCounter(Arc<AtomicU64>);

impl ByteCounter {
    pub fn add(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A reader that adds every byte it reads to a [`ByteCounter`].
pub struct Counting<R> {
    inner: R,
    counter: ByteCounter,
}

impl<R> Counting<R> {
    pub fn new(inner: R, counter: ByteCounter) -> Counting<R> {
        Counting { inner, counter }
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.add(n as u64);
        Ok(n)
    }
}

/// The progress line of one run.
pub struct Progress {
    /// Where the line goes; `None` when it is not shown.
    sink: Option<Box<dyn Write>>,
    counter: ByteCounter,
    /// Sum of the input sizes, when every input has a known size.
    total_bytes: Option<u64>,
    started: Instant,
    last_draw: Option<Instant>,
    /// Characters of the line on screen, to blank it out.
    drawn_width: usize,
}

impl Progress {
    /// A progress line on stderr when `show`, otherwise one that never draws.
    pub fn new(show: bool, total_bytes: Option<u64>) -> Progress {
        let sink: Option<Box<dyn Write>> = if show {
            Some(Box::new(io::stderr()))
        } else {
            None
        };
        Progress::to_sink(sink, total_bytes)
    }

    /// A progress line that never draws.
    #[cfg(test)]
    pub fn hidden() -> Progress {
        Progress::to_sink(None, None)
    }

    fn to_sink(sink: Option<Box<dyn Write>>, total_bytes: Option<u64>) -> Progress {
        Progress {
            sink,
            counter: ByteCounter::default(),
            total_bytes,
            started: Instant::now(),
            last_draw: None,
            drawn_width: 0,
        }
    }

    /// The counter the input readers add their raw bytes to.
    pub fn counter(&self) -> ByteCounter {
        self.counter.clone()
    }

    /// Redraws the line if it is shown and due. Call it per chunk, not per line.
    pub fn update(&mut self, read: Counts) {
        if self.sink.is_none() {
            return;
        }
        self.update_at(Instant::now(), read);
    }

    fn update_at(&mut self, now: Instant, read: Counts) {
        if self.sink.is_none() {
            return;
        }
        let due = match self.last_draw {
            None => now.duration_since(self.started) >= FIRST_DRAW_AFTER,
            Some(last) => now.duration_since(last) >= REDRAW_EVERY,
        };
        if !due {
            return;
        }
        let line = render(self.counter.get(), self.total_bytes, read);
        let width = line.chars().count();
        let pad = self.drawn_width.saturating_sub(width);
        self.write(&format!("\r{line}{:pad$}", ""));
        self.drawn_width = width;
        self.last_draw = Some(now);
    }

    /// Clears the line, if one was drawn. Called at the end of reading (and on drop, so that
    /// an error message never lands after a half-erased line).
    pub fn finish(&mut self) {
        if self.drawn_width > 0 {
            let blank = format!("\r{:w$}\r", "", w = self.drawn_width);
            self.write(&blank);
            self.drawn_width = 0;
        }
    }

    fn write(&mut self, text: &str) {
        if let Some(sink) = &mut self.sink {
            // A progress line that cannot be written is not worth failing the run for.
            if sink
                .write_all(text.as_bytes())
                .and_then(|_| sink.flush())
                .is_err()
            {
                self.sink = None;
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What the line counts besides bytes: the events read so far (spilled ones included), and
/// their operations while none has been spilled (a spilled run no longer holds them all
/// to count them).
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub events: u64,
    pub operations: Option<u64>,
}

/// `attempt-funnel: read 312.4 MiB of 920.0 MiB (34%), 1,623,000 events, 340,120 operations`
fn render(bytes: u64, total: Option<u64>, counts: Counts) -> String {
    let read = match total {
        Some(total) if total > 0 => format!(
            "{} of {} ({}%)",
            crate::words::bytes(bytes),
            crate::words::bytes(total),
            (bytes.min(total) * 100 / total)
        ),
        _ => crate::words::bytes(bytes),
    };
    let events = counted(counts.events, "event", "events");
    match counts.operations {
        Some(operations) => format!(
            "attempt-funnel: read {read}, {events}, {}",
            counted(operations, "operation", "operations")
        ),
        None => format!("attempt-funnel: read {read}, {events}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl Write for Screen {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Screen {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn shows_only_on_a_terminal_outside_ci() {
        let cases: [(bool, Option<&str>, bool); 7] = [
            (true, None, true),
            (false, None, false),
            (true, Some("true"), false),
            (true, Some("1"), false),
            (true, Some(""), true),
            (true, Some("false"), true),
            (false, Some("false"), false),
        ];
        for (terminal, ci, expected) in cases {
            assert_eq!(
                should_show(terminal, ci.map(OsStr::new)),
                expected,
                "terminal {terminal}, CI={ci:?}"
            );
        }
    }

    fn counts(events: u64, operations: Option<u64>) -> Counts {
        Counts { events, operations }
    }

    #[test]
    fn renders_bytes_of_the_total_events_and_operations() {
        assert_eq!(
            render(3 << 20, Some(12 << 20), counts(1_623_000, Some(340_120))),
            "attempt-funnel: read 3.0 MiB of 12.0 MiB (25%), 1,623,000 events, 340,120 operations"
        );
        assert_eq!(
            render(512, None, counts(7, Some(1))),
            "attempt-funnel: read 512 B, 7 events, 1 operation"
        );
        // Spilled: the operations are no longer all held to be counted.
        assert_eq!(
            render(512 << 20, None, counts(2_500_000, None)),
            "attempt-funnel: read 512.0 MiB, 2,500,000 events"
        );
    }

    #[test]
    fn sizes_are_readable() {
        let sizes = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (920 << 20, "920.0 MiB"),
            (3 << 30, "3.0 GiB"),
        ];
        for (bytes, text) in sizes {
            assert_eq!(crate::words::bytes(bytes), text);
        }
    }

    #[test]
    fn draws_after_the_first_delay_at_most_ten_times_a_second_and_clears_at_the_end() {
        let screen = Screen::default();
        let mut progress = Progress::to_sink(Some(Box::new(screen.clone())), Some(1000));
        let t0 = progress.started;
        progress.counter().add(100);
        progress.update_at(t0 + Duration::from_millis(100), counts(10, Some(1)));
        assert_eq!(screen.text(), "", "nothing before FIRST_DRAW_AFTER");
        progress.update_at(t0 + FIRST_DRAW_AFTER, counts(10, Some(1)));
        let first = screen.text();
        assert!(
            first.starts_with('\r') && first.contains("(10%)"),
            "{first:?}"
        );
        progress.update_at(
            t0 + FIRST_DRAW_AFTER + Duration::from_millis(50),
            counts(20, Some(2)),
        );
        assert_eq!(screen.text(), first, "no redraw within REDRAW_EVERY");
        progress.update_at(t0 + FIRST_DRAW_AFTER + REDRAW_EVERY, counts(20, Some(2)));
        assert!(screen.text().ends_with("20 events, 2 operations"));
        progress.finish();
        let all = screen.text();
        let last = all.rsplit('\r').nth(1).unwrap();
        assert!(all.ends_with('\r'), "{all:?}");
        assert!(last.chars().all(|c| c == ' ') && !last.is_empty());
    }

    #[test]
    fn a_hidden_progress_never_writes() {
        let mut progress = Progress::hidden();
        progress.update_at(Instant::now() + Duration::from_secs(5), counts(1, Some(1)));
        progress.finish();
        assert_eq!(progress.drawn_width, 0);
    }

    #[test]
    fn counting_reader_counts_raw_bytes() {
        let counter = ByteCounter::default();
        let mut reader = Counting::new(&b"hello world"[..], counter.clone());
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        assert_eq!(counter.get(), 11);
    }
}
