//! Sources: how the inputs named on the command line become streams to read.
//!
//! Each argument is one or more inputs ([`resolve`]):
//!
//! - `-` (or no argument): standard input;
//! - a file: itself;
//! - a directory: every file under it, recursively, in sorted path order, skipping hidden
//!   files and directories (names starting with `.`) and not following links to
//!   directories;
//! - a path that does not exist but holds `*`, `?` or `[`: a glob pattern, expanded here
//!   (`'logs/*.jsonl.gz'`, `'logs/**/*.zst'`) because a quoted pattern reaches us unexpanded.
//!   As in a shell, `*` does not cross `/` and does not match a leading `.`.
//!
//! A directory or a pattern that yields no file is an error: an empty input set is far more
//! often a typo than an intent. A special file (a FIFO, a socket, a device) met while
//! walking a directory or expanding a pattern is skipped with a note: opening a FIFO that
//! nobody writes to waits forever, and a device may never end. Named on the command line,
//! it is read as a stream (`<(zcat …)`, /dev/stdin), with the per-line limit as for any
//! input.
//!
//! Input names are escaped for the terminal here, once ([`crate::escape::terminal`]): every
//! message that names an input, bad-line messages included, then shows a newline or an
//! escape sequence in a file name as visible text.
//!
//! Each input is then opened ([`open`]) and its content recognised by its first bytes, never
//! by its name: gzip (`1f 8b`, several members allowed, as `cat a.gz b.gz` makes), zstd
//! (`28 b5 2f fd`, several frames allowed), Parquet (`PAR1`), else text lines.

use std::fs::{self, File};
use std::io::{self, BufReader, Cursor, IsTerminal, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::progress::{ByteCounter, Counting};
use super::InputPath;

/// The longest magic number we look for.
const MAGIC_LEN: usize = 4;
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const PARQUET_MAGIC: &[u8] = b"PAR1";

/// One input to read, after directories and patterns are expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// How messages name it: the path as given or as found, or `<stdin>`.
    pub name: String,
    /// Size on disk in bytes, when known (regular files).
    pub size: Option<u64>,
    location: Location,
}

impl Input {
    /// A regular file, which can be opened and read again (not a stream, nor a pipe).
    pub fn rereadable(&self) -> bool {
        matches!(self.location, Location::File(_)) && self.size.is_some()
    }

    /// The file read, when it is one (not stdin).
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::File(p) => Some(p),
            Location::Stdin => None,
        }
    }

    /// An input known only by its name, of unknown size (for tests of the readers).
    #[cfg(test)]
    pub fn named(name: &str) -> Input {
        Input {
            name: name.to_string(),
            size: None,
            location: Location::Stdin,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    Stdin,
    File(PathBuf),
}

/// What an opened input holds.
pub enum Content {
    /// Text lines (JSON Lines or logfmt), already decompressed; `as_stored`: the text is
    /// the input's bytes as stored (not decompressed), so that its size on disk measures
    /// how much of it has been read.
    Lines {
        text: Box<dyn Read + Send>,
        as_stored: bool,
    },
    /// A Parquet file: read by columns, so it needs to seek.
    Parquet(ParquetData),
}

/// The bytes of a Parquet input: the file itself, or, for a stream (stdin, a compressed
/// file), the whole stream in memory.
pub enum ParquetData {
    File(File),
    Memory(Cursor<Vec<u8>>),
}

/// The kind of a stream, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gzip,
    Zstd,
    Parquet,
    Text,
}

fn sniff(head: &[u8]) -> Kind {
    if head.starts_with(GZIP_MAGIC) {
        Kind::Gzip
    } else if head.starts_with(ZSTD_MAGIC) {
        Kind::Zstd
    } else if head.starts_with(PARQUET_MAGIC) {
        Kind::Parquet
    } else {
        Kind::Text
    }
}

/// The inputs to read, in order, and notes on what the expansion skipped.
#[derive(Debug, Default)]
pub struct Resolved {
    pub inputs: Vec<Input>,
    pub notes: Vec<String>,
}

/// Expands the command-line inputs into the inputs to read, in order.
pub fn resolve(paths: &[InputPath]) -> Result<Resolved> {
    let mut out = Resolved::default();
    for path in paths {
        match path {
            InputPath::Stdin => out.inputs.push(Input {
                name: path.display(),
                size: None,
                location: Location::Stdin,
            }),
            InputPath::File(p) => expand(p, &mut out)?,
        }
    }
    Ok(out)
}

/// How messages name a path: its display form, escaped for the terminal.
fn display_name(path: &Path) -> String {
    crate::escape::terminal(&path.display().to_string()).into_owned()
}

/// The sum of the input sizes, when every one is known.
pub fn total_size(inputs: &[Input]) -> Option<u64> {
    inputs.iter().map(|i| i.size).sum()
}

fn expand(path: &Path, out: &mut Resolved) -> Result<()> {
    let name = display_name(path);
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let before = out.inputs.len();
            expand_dir(path, out)?;
            if out.inputs.len() == before {
                bail!("directory '{name}' holds no input files (hidden files, whose names start with '.', are skipped, and so are FIFOs, sockets and devices)");
            }
            Ok(())
        }
        Ok(meta) => {
            out.inputs.push(file_input(path, &meta));
            Ok(())
        }
        Err(err) => match path.to_str().filter(|p| p.contains(['*', '?', '['])) {
            Some(pattern) => expand_glob(pattern, out),
            None => Err(err).with_context(|| format!("could not read '{name}'")),
        },
    }
}

fn file_input(path: &Path, meta: &fs::Metadata) -> Input {
    Input {
        name: display_name(path),
        // A FIFO or a device (`<(zcat …)`, /dev/stdin) has no size worth showing.
        size: meta.is_file().then_some(meta.len()),
        location: Location::File(path.to_path_buf()),
    }
}

fn expand_dir(dir: &Path, out: &mut Resolved) -> Result<()> {
    let mut found = Vec::new();
    walk(dir, &mut found)?;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, meta) in found {
        add_found(&path, &meta, out);
    }
    Ok(())
}

/// A regular file found by a walk or a pattern is an input; a special file is skipped with
/// a note (see the module documentation).
fn add_found(path: &Path, meta: &fs::Metadata, out: &mut Resolved) {
    if meta.is_file() {
        out.inputs.push(file_input(path, meta));
    } else {
        out.notes.push(format!(
            "skipped '{}': not a regular file (a FIFO, socket or device); name it on its own to read it as a stream",
            display_name(path)
        ));
    }
}

/// Every file under `dir`, hidden ones left out, links to directories not followed (they
/// could loop).
fn walk(dir: &Path, found: &mut Vec<(PathBuf, fs::Metadata)>) -> Result<()> {
    let context = || format!("could not read directory '{}'", display_name(dir));
    for entry in fs::read_dir(dir).with_context(context)? {
        let entry = entry.with_context(context)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().with_context(context)?;
        if kind.is_dir() {
            walk(&path, found)?;
            continue;
        }
        let meta = fs::metadata(&path)
            .with_context(|| format!("could not read '{}'", display_name(&path)))?;
        if !meta.is_dir() {
            found.push((path, meta));
        }
    }
    Ok(())
}

fn expand_glob(pattern: &str, out: &mut Resolved) -> Result<()> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let paths = glob::glob_with(pattern, options).with_context(|| {
        format!("could not read '{pattern}': no such file, and not a valid glob pattern")
    })?;
    let before = out.inputs.len();
    for path in paths {
        let path = path.with_context(|| format!("could not expand '{pattern}'"))?;
        let meta = fs::metadata(&path)
            .with_context(|| format!("could not read '{}'", display_name(&path)))?;
        if meta.is_dir() {
            expand_dir(&path, out)?;
        } else {
            add_found(&path, &meta, out);
        }
    }
    if out.inputs.len() == before {
        bail!("no file matches '{pattern}' (patterns are expanded with * ? [..] and **; hidden files are skipped)");
    }
    Ok(())
}

/// Said on stderr, before reading, when the input is standard input and standard input is a
/// terminal: someone who forgot the file name would otherwise face a silent wait, and
/// someone typing events needs to know how to end them.
pub const STDIN_IS_A_TERMINAL: &str =
    "reading attempt events from standard input; pass a file or pipe logs in; Ctrl-D ends";

/// Opens an input, adding the raw bytes it reads to `counter`, and recognises its content.
pub fn open(input: &Input, counter: &ByteCounter) -> Result<Content> {
    let context = || format!("could not read '{}'", input.name);
    match &input.location {
        Location::Stdin => {
            if io::stdin().is_terminal() {
                eprintln!("attempt-funnel: {STDIN_IS_A_TERMINAL}");
            }
            let mut stdin = Counting::new(Fused::new(io::stdin()), counter.clone());
            let head = read_head(&mut stdin).with_context(context)?;
            content(head, stdin).with_context(context)
        }
        Location::File(path) => {
            let mut file = File::open(path).with_context(context)?;
            let head = read_head(&mut file).with_context(context)?;
            if sniff(&head) == Kind::Parquet && input.size.is_some() {
                file.seek(SeekFrom::Start(0)).with_context(context)?;
                return Ok(Content::Parquet(ParquetData::File(file)));
            }
            counter.add(head.len() as u64);
            content(head, Counting::new(file, counter.clone())).with_context(context)
        }
    }
}

/// A reader that, once it has reported the end, keeps reporting it. A terminal's end
/// (Ctrl-D) is not sticky: the read after it waits for more typing, and ours looks at the
/// first bytes before reading the rest, so without this one Ctrl-D would not end the input.
struct Fused<R> {
    inner: R,
    ended: bool,
}

impl<R> Fused<R> {
    fn new(inner: R) -> Fused<R> {
        Fused {
            inner,
            ended: false,
        }
    }
}

impl<R: Read> Read for Fused<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ended || buf.is_empty() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        self.ended = n == 0;
        Ok(n)
    }
}

/// Up to [`MAGIC_LEN`] first bytes (fewer only at the end of the stream).
fn read_head(reader: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(MAGIC_LEN);
    reader.take(MAGIC_LEN as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// The content of a stream whose first bytes, `head`, were already taken from `rest`.
fn content(head: Vec<u8>, rest: impl Read + Send + 'static) -> io::Result<Content> {
    let kind = sniff(&head);
    let stream = Cursor::new(head).chain(rest);
    let mut decoded: Box<dyn Read + Send> = match kind {
        Kind::Text => {
            return Ok(Content::Lines {
                text: Box::new(stream),
                as_stored: true,
            })
        }
        Kind::Parquet => return parquet_in_memory(Box::new(stream)),
        Kind::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(stream))),
        Kind::Zstd => Box::new(zstd::stream::read::Decoder::new(stream)?),
    };
    // A compressed Parquet file is unusual (its pages are compressed already) but cheap to
    // accept; a compressed compressed file is not worth a loop.
    let head = read_head(&mut decoded)?;
    if sniff(&head) == Kind::Parquet {
        return parquet_in_memory(Box::new(Cursor::new(head).chain(decoded)));
    }
    Ok(Content::Lines {
        text: Box::new(Cursor::new(head).chain(decoded)),
        as_stored: false,
    })
}

fn parquet_in_memory(mut stream: Box<dyn Read + Send>) -> io::Result<Content> {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    Ok(Content::Parquet(ParquetData::Memory(Cursor::new(bytes))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A fresh directory under the system temp directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let dir = std::env::temp_dir().join(format!(
                "attempt-funnel-source-{}-{nanos}-{name}",
                std::process::id()
            ));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn file(&self, rel: &str, contents: &[u8]) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, contents).unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn names(inputs: &[Input], root: &Path) -> Vec<String> {
        inputs
            .iter()
            .map(|i| {
                Path::new(&i.name)
                    .strip_prefix(root)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect()
    }

    fn file(path: PathBuf) -> InputPath {
        InputPath::File(path)
    }

    fn read_all(content: Content) -> Vec<u8> {
        match content {
            Content::Lines { text: mut r, .. } => {
                let mut out = Vec::new();
                r.read_to_end(&mut out).unwrap();
                out
            }
            Content::Parquet(_) => panic!("expected lines"),
        }
    }

    /// A stream that ends (returns 0) once, then would give more: a terminal after Ctrl-D.
    struct EndsThenMore(Vec<&'static [u8]>);

    impl Read for EndsThenMore {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let part = if self.0.is_empty() {
                &b"more"[..]
            } else {
                self.0.remove(0)
            };
            buf[..part.len()].copy_from_slice(part);
            Ok(part.len())
        }
    }

    #[test]
    fn the_first_end_of_a_stream_is_its_end() {
        let mut fused = Fused::new(EndsThenMore(vec![b"ab", b""]));
        let mut all = Vec::new();
        fused.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"ab");
        assert_eq!(fused.read(&mut [0; 8]).unwrap(), 0);
    }

    #[test]
    fn recognises_content_by_its_first_bytes() {
        let cases: [(&[u8], Kind); 7] = [
            (&[0x1f, 0x8b, 8, 0], Kind::Gzip),
            (&[0x28, 0xb5, 0x2f, 0xfd], Kind::Zstd),
            (b"PAR1", Kind::Parquet),
            (b"{\"op", Kind::Text),
            (b"PAR", Kind::Text),
            (&[0x1f], Kind::Text),
            (b"", Kind::Text),
        ];
        for (head, kind) in cases {
            assert_eq!(sniff(head), kind, "{head:?}");
        }
    }

    #[test]
    fn a_directory_is_its_files_recursively_in_sorted_order_without_hidden_ones() {
        let dir = TempDir::new("walk");
        dir.file("b.jsonl", b"");
        dir.file("a/2.jsonl", b"x");
        dir.file("a/10.jsonl", b"xy");
        dir.file(".hidden.jsonl", b"");
        dir.file(".git/config", b"");
        dir.file("c/.swap", b"");
        let inputs = resolve(&[file(dir.0.clone())]).unwrap().inputs;
        assert_eq!(
            names(&inputs, &dir.0),
            ["a/10.jsonl", "a/2.jsonl", "b.jsonl"]
        );
        assert_eq!(total_size(&inputs), Some(3));
    }

    #[test]
    fn an_empty_directory_is_an_error_naming_it() {
        let dir = TempDir::new("empty");
        dir.file(".only-hidden", b"");
        let err = resolve(&[file(dir.0.clone())]).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains(&dir.0.display().to_string()), "{text}");
        assert!(text.contains("holds no input files"), "{text}");
    }

    #[test]
    fn a_glob_pattern_is_expanded_in_sorted_order() {
        let dir = TempDir::new("glob");
        dir.file("part-2.jsonl.gz", b"");
        dir.file("part-1.jsonl.gz", b"");
        dir.file("part-1.jsonl", b"");
        dir.file("sub/part-3.jsonl.gz", b"");
        let pattern = dir.0.join("part-*.jsonl.gz");
        let inputs = resolve(&[file(pattern)]).unwrap().inputs;
        assert_eq!(
            names(&inputs, &dir.0),
            ["part-1.jsonl.gz", "part-2.jsonl.gz"]
        );
        let deep = resolve(&[file(dir.0.join("**/*.gz"))]).unwrap().inputs;
        assert_eq!(
            names(&deep, &dir.0),
            ["part-1.jsonl.gz", "part-2.jsonl.gz", "sub/part-3.jsonl.gz"]
        );
    }

    #[test]
    fn a_glob_that_matches_nothing_is_an_error_naming_the_pattern() {
        let dir = TempDir::new("noglob");
        let pattern = dir.0.join("*.zst");
        let err = format!("{:#}", resolve(&[file(pattern.clone())]).unwrap_err());
        assert!(err.contains(&pattern.display().to_string()), "{err}");
        assert!(err.contains("no file matches"), "{err}");
    }

    #[test]
    fn a_missing_plain_path_is_not_taken_for_a_pattern() {
        let err = format!(
            "{:#}",
            resolve(&[file(PathBuf::from("no/such/file.jsonl"))]).unwrap_err()
        );
        assert!(
            err.starts_with("could not read 'no/such/file.jsonl'"),
            "{err}"
        );
    }

    #[test]
    fn opens_plain_gzip_and_zstd_files_to_the_same_text() {
        let dir = TempDir::new("open");
        let text = b"{\"operation_id\":\"a\",\"start_ms\":1}\n".repeat(3);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        let gz = gz.finish().unwrap();
        // Two gzip members back to back read as one stream.
        let two_members = [gz.clone(), gz.clone()].concat();
        let zst = zstd::encode_all(&text[..], 1).unwrap();
        let files = [
            dir.file("plain.jsonl", &text),
            dir.file("packed.txt", &gz),
            dir.file("packed.zst.bin", &zst),
            dir.file("twice.gz", &two_members),
        ];
        let inputs = resolve(&files.map(file)).unwrap().inputs;
        let counter = ByteCounter::default();
        let read: Vec<Vec<u8>> = inputs
            .iter()
            .map(|i| read_all(open(i, &counter).unwrap()))
            .collect();
        assert_eq!(read[0], text);
        assert_eq!(read[1], text);
        assert_eq!(read[2], text);
        assert_eq!(read[3], [text.clone(), text.clone()].concat());
        assert_eq!(counter.get(), total_size(&inputs).unwrap());
    }

    #[test]
    fn a_corrupt_gzip_file_fails_naming_it() {
        let dir = TempDir::new("corrupt");
        let path = dir.file(
            "bad.gz",
            &[0x1f, 0x8b, 8, 0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        );
        let inputs = resolve(&[file(path.clone())]).unwrap().inputs;
        let err = match open(&inputs[0], &ByteCounter::default()) {
            Err(err) => err,
            Ok(content) => {
                let Content::Lines { text: mut r, .. } = content else {
                    panic!("not parquet")
                };
                let err = r.read_to_end(&mut Vec::new()).unwrap_err();
                anyhow::Error::from(err).context(format!("could not read '{}'", inputs[0].name))
            }
        };
        assert!(
            format!("{err:#}").contains(&path.display().to_string()),
            "{err:#}"
        );
    }

    #[test]
    fn a_parquet_file_is_opened_for_seeking() {
        let dir = TempDir::new("parquet");
        let path = dir.file("events.bin", b"PAR1 not really");
        let inputs = resolve(&[file(path)]).unwrap().inputs;
        assert!(matches!(
            open(&inputs[0], &ByteCounter::default()).unwrap(),
            Content::Parquet(ParquetData::File(_))
        ));
    }
}
