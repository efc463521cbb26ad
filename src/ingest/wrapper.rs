//! Container log wrappers: what a container runtime writes around each line an application
//! prints, taken off before the line is read, so that a pod's log file reads as the
//! application's own lines.
//!
//! ```text
//! 2026-03-01T10:00:00.000123456Z stdout F {"operation_id":"c-1",…}        CRI (the kubelet's /var/log/pods)
//! {"log":"{\"operation_id\":\"c-1\",…}\n","stream":"stdout","time":"…"}   Docker's json-file driver
//! ```
//!
//! Both split a long line into pieces (CRI at 16 KiB by default: `P` pieces, then the `F`
//! one; Docker: pieces whose `log` does not end in a newline), each stream on its own, and
//! may cut through a multi-byte character. The pieces are joined per stream. Every line
//! read gives one line out, so that `path:line` stays the physical line: a piece leaves a
//! blank line, and the joined line stands at its last piece. Lines that are not wrapped
//! pass as they are.

/// What wraps a file's lines, told by its first non-blank line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cri,
    Docker,
}

/// Unwraps the lines of one file, chunk after chunk, holding the pieces of a split line
/// until its last piece comes.
#[derive(Debug)]
pub struct Unwrapper {
    kind: Kind,
    /// The pieces so far of a split line, on stdout and on stderr.
    pending: [Vec<u8>; 2],
}

/// One wrapped line: its stream (0 stdout, 1 stderr), its content, and whether it is the
/// last piece of its line.
struct Piece<'a> {
    stream: usize,
    content: std::borrow::Cow<'a, [u8]>,
    last: bool,
}

impl Unwrapper {
    /// An unwrapper for a file whose first non-blank line is `first_line`, when that line is
    /// wrapped; `None` otherwise (the file is read as it is).
    pub fn detect(first_line: &[u8]) -> Option<Unwrapper> {
        let kind = if cri(first_line).is_some() {
            Kind::Cri
        } else if docker(first_line).is_some() {
            Kind::Docker
        } else {
            return None;
        };
        Some(Unwrapper {
            kind,
            pending: [Vec::new(), Vec::new()],
        })
    }

    /// The whole lines `chunk` holds, unwrapped: one line out for each line in. At the end
    /// of the file (`eof`), a split line whose last piece never came follows, without a
    /// newline: it reads as a line cut short.
    pub fn unwrap(&mut self, chunk: &[u8], eof: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        let mut rest = chunk;
        while !rest.is_empty() {
            let (line, ended, next) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], true, &rest[i + 1..]),
                None => (rest, false, &rest[rest.len()..]),
            };
            rest = next;
            let body = line.strip_suffix(b"\r").unwrap_or(line);
            let piece = match self.kind {
                Kind::Cri => cri(body),
                Kind::Docker => docker(body),
            };
            match piece {
                None => out.extend_from_slice(line),
                Some(piece) if piece.last => {
                    out.append(&mut self.pending[piece.stream]);
                    out.extend_from_slice(&piece.content);
                }
                // A piece leaves a blank line, which keeps the numbering.
                Some(piece) => self.pending[piece.stream].extend_from_slice(&piece.content),
            }
            if ended {
                out.push(b'\n');
            }
        }
        if eof {
            for pending in &mut self.pending {
                if !pending.is_empty() {
                    if out.last().is_some_and(|&b| b != b'\n') {
                        out.push(b'\n');
                    }
                    out.append(pending);
                }
            }
        }
        out
    }
}

/// The index in [`Unwrapper::pending`] of a stream, by the name both wrappers give it.
fn stream(name: &[u8]) -> Option<usize> {
    match name {
        b"stdout" => Some(0),
        b"stderr" => Some(1),
        _ => None,
    }
}

/// `TIME STREAM TAG CONTENT`, as CRI runtimes write it: an RFC 3339 time, `stdout` or
/// `stderr`, `F` (a full line, or the last piece) or `P` (a piece), then the content.
fn cri(line: &[u8]) -> Option<Piece<'_>> {
    let mut fields = line.splitn(4, |&b| b == b' ');
    let time = fields.next()?;
    let is_time = time.first().is_some_and(u8::is_ascii_digit)
        && time.contains(&b'T')
        && time
            .iter()
            .all(|b| b.is_ascii_digit() || b"-:.TZ+".contains(b));
    if !is_time {
        return None;
    }
    let stream = stream(fields.next()?)?;
    // Tags are separated by `:`; the first says full or partial.
    let last = match fields.next()?.split(|&b| b == b':').next()? {
        b"F" => true,
        b"P" => false,
        _ => return None,
    };
    let content = fields.next().unwrap_or_default();
    Some(Piece {
        stream,
        content: content.into(),
        last,
    })
}

/// `{"log":"…\n","stream":"stdout","time":"…"}`, as Docker's json-file driver writes it; a
/// `log` that does not end in a newline is a piece of a longer line.
fn docker(line: &[u8]) -> Option<Piece<'_>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        log: String,
        stream: String,
        #[allow(dead_code)]
        time: Option<String>,
        #[allow(dead_code)]
        attrs: Option<serde::de::IgnoredAny>,
    }
    if !line.starts_with(b"{\"log\":") {
        return None;
    }
    let entry: Entry = serde_json::from_slice(line).ok()?;
    let stream = stream(entry.stream.as_bytes())?;
    let mut content = entry.log.into_bytes();
    let last = content.last() == Some(&b'\n');
    if last {
        content.pop();
        if content.last() == Some(&b'\r') {
            content.pop();
        }
    }
    Some(Piece {
        stream,
        content: content.into(),
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(text: &[u8]) -> &[u8] {
        text.split(|&b| b == b'\n').next().unwrap()
    }

    #[test]
    fn cri_pieces_join_per_stream_and_keep_the_line_numbers() {
        let text = b"2026-03-01T10:00:00.1Z stdout P {\"a\":\n2026-03-01T10:00:00.2Z stderr F Traceback\n2026-03-01T10:00:00.3Z stdout F 1}\nplain\n";
        let mut u = Unwrapper::detect(first(text)).expect("CRI");
        let out = u.unwrap(text, true);
        assert_eq!(out, b"\nTraceback\n{\"a\":1}\nplain\n");
    }

    #[test]
    fn docker_pieces_join_and_an_unfinished_one_ends_the_file_cut_short() {
        let text = b"{\"log\":\"{\\\"a\\\":\",\"stream\":\"stdout\",\"time\":\"t\"}\n{\"log\":\"1}\\n\",\"stream\":\"stdout\",\"time\":\"t\"}\n{\"log\":\"{\\\"b\",\"stream\":\"stdout\",\"time\":\"t\"}\n";
        let mut u = Unwrapper::detect(first(text)).expect("Docker");
        let out = u.unwrap(text, true);
        assert_eq!(out, b"\n{\"a\":1}\n\n{\"b");
    }

    #[test]
    fn lines_that_are_not_wrapped_are_not_taken_for_wrapped_ones() {
        for line in [
            &b"{\"operation_id\":\"a\"}"[..],
            b"2026-03-01 10:00:00 INFO Starting",
            b"ts=2026-03-01T10:00:00Z stdout F",
            b"{\"log\":\"x\",\"level\":\"info\"}",
        ] {
            assert!(
                Unwrapper::detect(line).is_none(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
