//! Reading ahead: a large input's bytes are read, and decompressed, on a thread of their
//! own, a chunk ahead of the parsing ([`Bytes`] decides which inputs), into blocks the
//! parsing takes over whole ([`Unparsed`]).
//!
//! Without it, the thread that hands lines to the parsers also read each chunk, and both
//! cores waited while it did, for a plain file and far more for a zstd or gzip one,
//! whose decoding is a core's work. Memory is bounded:
//! at most [`BLOCKS_AHEAD`] blocks wait, one is being filled and one is being parsed, and
//! the parsed ones go back to the thread to be filled again (no page is faulted in anew).

use std::io::{self, Read};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};

/// Inputs of at least this size on disk, and streams, are read ahead; smaller files are
/// read in place. A thread for each small file costs more than it saves (a directory of
/// thousands of small logs would wait on thread scheduling file after file), and a file
/// under one chunk (8 MiB) is taken in one read anyway, so reading it ahead could not
/// overlap anything.
pub const READ_AHEAD_FROM: u64 = 8 << 20;

/// Bytes read at a time: a chunk of the parsers' (see `CHUNK_BYTES`).
const BLOCK_BYTES: usize = super::CHUNK_BYTES;

/// Room kept in front of each block's bytes for the line the chunk before ended in the
/// middle of: a line up to this long (the default line limit) is moved there, and the
/// block becomes the next chunk as it is. Before, every block was copied onto the end of
/// the chunk's own buffer, on the thread the parsers wait for: 0.17–0.21 s of a 1 M
/// operation run's reading (951 MB copied). A longer line is joined by copying.
const HEADROOM: usize = 1 << 20;

/// Filled blocks that may wait for the parsers: a whole chunk, so that the parsers take
/// the next one at once when they are done with one, while the thread fills another.
/// (With blocks of 1 MiB, two waiting made the parsers wait for six more to be read, every
/// chunk: the cores were a fifth idle while a plain file was read.)
const BLOCKS_AHEAD: usize = 1;

/// The bytes read and not parsed yet, `bytes[start..]`: the whole lines of a chunk are
/// parsed and let go of ([`Unparsed::consume`]), and the line it ends in the middle of
/// waits for the next block, in front of which it is moved ([`HEADROOM`]).
#[derive(Default)]
pub struct Unparsed {
    bytes: Vec<u8>,
    start: usize,
}

impl Unparsed {
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// Lets go of the first `n` bytes (parsed, or skipped).
    pub fn consume(&mut self, n: usize) {
        assert!(
            n <= self.bytes.len() - self.start,
            "consumed past the bytes read"
        );
        self.start += n;
    }

    /// Lets go of every byte read.
    pub fn clear(&mut self) {
        self.start = self.bytes.len();
    }

    /// The bytes as a vector of their own (for a reader of whole documents).
    pub fn into_vec(mut self) -> Vec<u8> {
        self.compact();
        self.bytes
    }

    fn extend(&mut self, more: &[u8]) {
        self.compact();
        self.bytes.extend_from_slice(more);
    }

    fn compact(&mut self) {
        self.bytes.drain(..self.start);
        self.start = 0;
    }
}

/// An input's bytes as the reader takes them, a chunk at a time.
pub enum Bytes {
    InPlace(Box<dyn Read + Send>),
    Ahead(ReadAhead),
}

impl Bytes {
    /// `size`: the input's size on disk, when known (not for standard input or a pipe).
    pub fn new(inner: Box<dyn Read + Send>, size: Option<u64>) -> io::Result<Bytes> {
        Ok(match size {
            Some(size) if size < READ_AHEAD_FROM => Bytes::InPlace(inner),
            _ => Bytes::Ahead(ReadAhead::new(inner)?),
        })
    }

    /// Adds the next chunk of the input (up to [`BLOCK_BYTES`]) after the bytes `text`
    /// holds; returns how many bytes (0 at the end).
    pub fn read_more(&mut self, text: &mut Unparsed) -> io::Result<usize> {
        match self {
            Bytes::InPlace(inner) => {
                text.compact();
                inner.take(BLOCK_BYTES as u64).read_to_end(&mut text.bytes)
            }
            Bytes::Ahead(ahead) => ahead.read_more(text),
        }
    }
}

impl Read for Bytes {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Bytes::InPlace(inner) => inner.read(buf),
            Bytes::Ahead(ahead) => ahead.read(buf),
        }
    }
}

/// A filled block: its bytes, of which `len` were read after the first [`HEADROOM`].
/// Never empty but at the end of the input, which is said by a block of length 0.
struct Block {
    bytes: Vec<u8>,
    len: usize,
}

impl Block {
    fn data(&self) -> &[u8] {
        &self.bytes[HEADROOM..HEADROOM + self.len]
    }
}

/// An input read ahead on its own thread (see the module's text). Dropping it stops the
/// thread at its next block, or at once when it waits for room.
pub struct ReadAhead {
    filled: Receiver<io::Result<Block>>,
    empty: Sender<Vec<u8>>,
    /// The block read from through [`Read`].
    current: Block,
    /// How much of `current` has been taken.
    at: usize,
    ended: bool,
}

impl ReadAhead {
    pub fn new(mut inner: Box<dyn Read + Send>) -> io::Result<ReadAhead> {
        let (to_parsers, filled) = sync_channel(BLOCKS_AHEAD);
        let (empty, returned) = channel::<Vec<u8>>();
        // Every block there will be, made here: memory of this thread's heap, reused when
        // it is freed after the reading (a block made on the reading thread, freed after
        // that thread ended, stayed with the process until the end of the run). Enough
        // for the ones waiting, the one being filled and the one being parsed.
        for _ in 0..BLOCKS_AHEAD + 2 {
            empty
                .send(vec![0; HEADROOM + BLOCK_BYTES])
                .expect("the receiver is still here");
        }
        std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || loop {
                // None once the reader is dropped: nobody wants the rest.
                let Ok(mut bytes) = returned.recv() else {
                    return;
                };
                let result =
                    fill(&mut inner, &mut bytes[HEADROOM..]).map(|len| Block { bytes, len });
                let last = !matches!(&result, Ok(block) if block.len > 0);
                // The reader was dropped: nobody wants the rest.
                if to_parsers.send(result).is_err() || last {
                    return;
                }
            })?;
        Ok(ReadAhead {
            filled,
            empty,
            current: Block {
                bytes: vec![0; HEADROOM],
                len: 0,
            },
            at: 0,
            ended: false,
        })
    }

    /// Adds the next block after the bytes `text` holds; returns how many bytes (0 at the
    /// end). The block becomes `text`'s buffer, the bytes it held moved in front of it,
    /// unless they are longer than [`HEADROOM`]: then the block is copied after them.
    pub fn read_more(&mut self, text: &mut Unparsed) -> io::Result<usize> {
        // What was left of a block read through `Read` comes first.
        if self.at < self.current.len {
            let rest = &self.current.data()[self.at..];
            text.extend(rest);
            self.at = self.current.len;
            return Ok(rest.len());
        }
        let Some(block) = self.next_block()? else {
            return Ok(0);
        };
        let len = block.len;
        let tail = text.bytes();
        if tail.len() <= HEADROOM {
            let mut bytes = block.bytes;
            let start = HEADROOM - tail.len();
            bytes[start..HEADROOM].copy_from_slice(tail);
            bytes.truncate(HEADROOM + len);
            let parsed = std::mem::replace(text, Unparsed { bytes, start });
            self.give_back(parsed.bytes);
        } else {
            text.extend(block.data());
            self.give_back(block.bytes);
        }
        Ok(len)
    }

    /// The next filled block, `None` at the end of the input.
    fn next_block(&mut self) -> io::Result<Option<Block>> {
        if self.ended {
            return Ok(None);
        }
        let block = match self.filled.recv() {
            Ok(block) => block?,
            // The thread ended without saying the input ended: it panicked (a decoder
            // bug), and what it read last is lost. Never taken for the end of the input.
            Err(_) => return Err(io::Error::other("reading the input stopped unexpectedly")),
        };
        if block.len == 0 {
            self.ended = true;
            return Ok(None);
        }
        Ok(Some(block))
    }

    /// Back to the thread, to be filled again (as long as it reads: a thread that has
    /// ended takes no more, and the block is freed here). A buffer smaller than a block
    /// was never one (the text's first, the reader's empty first block) and is dropped:
    /// the thread has as many as it made. A block that grew while a long line was joined
    /// in it (OTLP lines may be 64 MiB) is replaced by a new one: its pages would stay in
    /// memory, and in time every block could have grown so.
    fn give_back(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() < HEADROOM + BLOCK_BYTES {
            return;
        }
        if bytes.capacity() > HEADROOM + BLOCK_BYTES {
            bytes = vec![0; HEADROOM + BLOCK_BYTES];
        }
        bytes.resize(HEADROOM + BLOCK_BYTES, 0);
        let _ = self.empty.send(bytes);
    }

    /// The bytes of the current block not yet taken, after waiting for the next block if
    /// none are left; empty at the end of the input.
    fn available(&mut self) -> io::Result<&[u8]> {
        if self.at == self.current.len {
            if let Some(next) = self.next_block()? {
                let used = std::mem::replace(&mut self.current, next);
                self.give_back(used.bytes);
                self.at = 0;
            }
        }
        Ok(&self.current.data()[self.at..])
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.available()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads into `bytes` until it is full or the input ends; returns how many bytes were read.
fn fill(inner: &mut dyn Read, bytes: &mut [u8]) -> io::Result<usize> {
    let mut len = 0;
    while len < bytes.len() {
        match inner.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives a few bytes per call, then fails.
    struct Failing {
        left: usize,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::other("disk on fire"));
            }
            let n = self.left.min(buf.len()).min(7);
            buf[..n].fill(b'x');
            self.left -= n;
            Ok(n)
        }
    }

    /// Every byte `bytes` gives, read a chunk at a time while the text waiting is let go
    /// of in uneven parts: `keep(n)` bytes of each chunk's end are kept waiting.
    fn read_all(bytes: &mut Bytes, keep: impl Fn(usize) -> usize) -> Vec<u8> {
        let (mut text, mut got, mut n) = (Unparsed::default(), Vec::new(), 0);
        while bytes.read_more(&mut text).unwrap() > 0 {
            let waiting = text.bytes();
            let taken = waiting.len() - keep(n).min(waiting.len());
            got.extend_from_slice(&waiting[..taken]);
            text.consume(taken);
            n += 1;
        }
        got.extend_from_slice(text.bytes());
        assert_eq!(
            bytes.read_more(&mut text).unwrap(),
            0,
            "the end stays the end"
        );
        got
    }

    #[test]
    fn reads_every_byte_in_order_across_blocks() {
        let text: Vec<u8> = (0..3 * BLOCK_BYTES + 12345)
            .map(|i| (i % 251) as u8)
            .collect();
        let ahead =
            || Bytes::Ahead(ReadAhead::new(Box::new(io::Cursor::new(text.clone()))).unwrap());
        // The bytes kept waiting moved in front of the next block.
        assert_eq!(
            read_all(&mut ahead(), |n| [0, 1, 777_777, HEADROOM][n % 4]),
            text
        );
        // More than fits in front of a block: the block is copied after them.
        assert_eq!(
            read_all(&mut ahead(), |n| [HEADROOM + 1, 2 * BLOCK_BYTES][n % 2]),
            text
        );
    }

    #[test]
    fn small_files_are_read_in_place_and_streams_ahead() {
        let text = b"a\nbb\n".repeat(10);
        let open = |size| Bytes::new(Box::new(io::Cursor::new(text.clone())), size).unwrap();
        assert!(matches!(open(Some(60)), Bytes::InPlace(_)));
        assert!(matches!(open(Some(READ_AHEAD_FROM)), Bytes::Ahead(_)));
        assert!(matches!(open(None), Bytes::Ahead(_)));
        for size in [Some(60), None] {
            assert_eq!(read_all(&mut open(size), |n| n % 3), text);
        }
    }

    #[test]
    fn reading_goes_on_after_reading_as_a_reader() {
        let text: Vec<u8> = (0..2 * BLOCK_BYTES + 99).map(|i| (i % 253) as u8).collect();
        let mut ahead = ReadAhead::new(Box::new(io::Cursor::new(text.clone()))).unwrap();
        let mut got = vec![0; 1000];
        ahead.read_exact(&mut got).unwrap();
        let mut bytes = Bytes::Ahead(ahead);
        got.extend(read_all(&mut bytes, |_| 5));
        assert_eq!(got, text);
    }

    #[test]
    fn reads_as_a_reader_too() {
        let text = b"a\nbb\nccc\n".repeat(1000);
        let mut ahead = ReadAhead::new(Box::new(io::Cursor::new(text.clone()))).unwrap();
        let mut got = Vec::new();
        ahead.read_to_end(&mut got).unwrap();
        assert_eq!(got, text);
    }

    #[test]
    fn an_error_reaches_the_reader_after_the_bytes_before_it() {
        let mut ahead = ReadAhead::new(Box::new(Failing { left: 100 })).unwrap();
        let mut got = Unparsed::default();
        let err = ahead.read_more(&mut got).unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
        // The bytes before the error were in the block that failed: they are not passed
        // on as if the input had ended there.
        assert!(got.bytes().is_empty());
    }

    #[test]
    fn a_reader_that_panics_is_an_error_not_an_end() {
        struct Panicking;
        impl Read for Panicking {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                panic!("decoder bug")
            }
        }
        let mut ahead = ReadAhead::new(Box::new(Panicking)).unwrap();
        let err = ahead.read_more(&mut Unparsed::default()).unwrap_err();
        assert!(err.to_string().contains("stopped unexpectedly"), "{err}");
    }

    #[test]
    fn dropping_it_early_stops_the_thread() {
        let endless = io::repeat(b'z');
        let mut ahead = ReadAhead::new(Box::new(endless)).unwrap();
        let mut got = Unparsed::default();
        ahead.read_more(&mut got).unwrap();
        drop(ahead);
        // Nothing to join: the thread's next send fails and it returns. What this holds
        // is that the drop neither waits for an endless input nor panics.
        assert_eq!(got.bytes(), vec![b'z'; BLOCK_BYTES]);
    }
}
