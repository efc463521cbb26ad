//! Reading ahead: a large input's bytes are read, and decompressed, on a thread of their
//! own, a chunk ahead of the parsing ([`Bytes`] decides which inputs).
//!
//! Without it, the thread that hands lines to the parsers also read each chunk, and both
//! cores waited while it did: a tenth of a 1 M-operation run's reading for a plain file,
//! and far more for a zstd or gzip one, whose decoding is a core's work. Memory is bounded:
//! at most [`BLOCKS_AHEAD`] blocks wait, one is being filled and one is being taken from,
//! and the taken ones go back to the thread to be filled again (no page is faulted in anew).

use std::io::{self, Read};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};

/// Inputs of at least this size on disk, and streams, are read ahead; smaller files are
/// read in place. A thread for each small file cost more than it saved: a directory of
/// 2 000 logs of ten lines took 6–8 s instead of 0.6 on a busy machine, each file waiting
/// for its thread to be scheduled. A file under one chunk (8 MiB) is taken in one read
/// anyway, so reading it ahead could not overlap anything.
pub const READ_AHEAD_FROM: u64 = 8 << 20;

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

    /// Appends up to `max` bytes to `buf`, fewer only at the end of the input; returns how
    /// many (0 at the end).
    pub fn append(&mut self, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        match self {
            Bytes::InPlace(inner) => inner.take(max as u64).read_to_end(buf),
            Bytes::Ahead(ahead) => ahead.append(buf, max),
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

/// Bytes per block: large enough that handing one over costs nothing next to reading it.
const BLOCK_BYTES: usize = 1 << 20;

/// Filled blocks that may wait for the parsers: a whole chunk and some, so that the reader
/// takes the next chunk at once when the parsers are done with one. With two, it waited
/// for the thread to read six more while both parse threads idled, every chunk: the cores
/// were a fifth idle while a plain file was read. At ten, in six alternating pairs at
/// 1 M operations, reading took 1.43 → 1.29 s (median; faster in all six), for about 12 MB
/// more peak.
const BLOCKS_AHEAD: usize = super::CHUNK_BYTES / BLOCK_BYTES + 2;

/// A filled block: its bytes, of which the first `len` were read. Never empty but at the
/// end of the input, which is said by a block of length 0.
struct Block {
    bytes: Vec<u8>,
    len: usize,
}

/// An input read ahead on its own thread (see the module's text). Dropping it stops the
/// thread at its next block, or at once when it waits for room.
pub struct ReadAhead {
    filled: Receiver<io::Result<Block>>,
    empty: Sender<Vec<u8>>,
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
        // for the ones waiting, the one being filled and the one being taken from.
        for _ in 0..BLOCKS_AHEAD + 2 {
            empty
                .send(vec![0; BLOCK_BYTES])
                .expect("the receiver is still here");
        }
        std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || loop {
                // None once the reader is dropped: nobody wants the rest.
                let Ok(mut bytes) = returned.recv() else {
                    return;
                };
                let result = fill(&mut inner, &mut bytes).map(|len| Block { bytes, len });
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
                bytes: Vec::new(),
                len: 0,
            },
            at: 0,
            ended: false,
        })
    }

    /// Appends up to `max` bytes to `buf`, fewer only at the end of the input; returns how
    /// many (0 at the end).
    pub fn append(&mut self, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        let mut appended = 0;
        while appended < max {
            let available = self.available()?;
            if available.is_empty() {
                break;
            }
            let n = available.len().min(max - appended);
            buf.extend_from_slice(&available[..n]);
            self.at += n;
            appended += n;
        }
        Ok(appended)
    }

    /// The bytes of the current block not yet taken, after waiting for the next block if
    /// none are left; empty at the end of the input.
    fn available(&mut self) -> io::Result<&[u8]> {
        if self.at == self.current.len && !self.ended {
            let next = match self.filled.recv() {
                Ok(next) => next?,
                // The thread ended without saying the input ended: it panicked (a decoder
                // bug), and what it read last is lost. Never taken for the end of the input.
                Err(_) => return Err(io::Error::other("reading the input stopped unexpectedly")),
            };
            let used = std::mem::replace(&mut self.current, next);
            // Back to be filled again (not the empty one a reader starts with); a thread
            // that has ended takes no more blocks back, and the block is freed here.
            if !used.bytes.is_empty() {
                let _ = self.empty.send(used.bytes);
            }
            self.at = 0;
            self.ended = self.current.len == 0;
        }
        Ok(&self.current.bytes[self.at..self.current.len])
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

    #[test]
    fn reads_every_byte_in_order_across_blocks() {
        let text: Vec<u8> = (0..3 * BLOCK_BYTES + 12345)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut ahead = ReadAhead::new(Box::new(io::Cursor::new(text.clone()))).unwrap();
        let mut got = Vec::new();
        // Uneven takes, across block boundaries.
        while ahead.append(&mut got, 777_777).unwrap() > 0 {}
        assert_eq!(got, text);
        assert_eq!(
            ahead.append(&mut got, 10).unwrap(),
            0,
            "the end stays the end"
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
            let (mut bytes, mut got) = (open(size), Vec::new());
            while bytes.append(&mut got, 7).unwrap() > 0 {}
            assert_eq!(got, text);
        }
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
        let mut got = Vec::new();
        let err = ahead.append(&mut got, 1000).unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
        // The bytes before the error were in the block that failed: they are not passed
        // on as if the input had ended there.
        assert!(got.is_empty());
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
        let err = ahead.append(&mut Vec::new(), 10).unwrap_err();
        assert!(err.to_string().contains("stopped unexpectedly"), "{err}");
    }

    #[test]
    fn dropping_it_early_stops_the_thread() {
        let endless = io::repeat(b'z');
        let mut ahead = ReadAhead::new(Box::new(endless)).unwrap();
        let mut got = Vec::new();
        ahead.append(&mut got, 10).unwrap();
        drop(ahead);
        // Nothing to join: the thread's next send fails and it returns. What this holds
        // is that the drop neither waits for an endless input nor panics.
        assert_eq!(got, b"zzzzzzzzzz");
    }
}
