//! The byte stream the Parquet worker process writes to its parent (see [`super`] for why
//! there is a worker): the one place that knows its layout, for both ends.
//!
//! A stream is a sequence of frames, each `kind: u8`, `len: u32` (little endian), then
//! `len` bytes of payload:
//!
//! ```text
//! H  rows: u64, columns: u16, then per column name_len: u16 + UTF-8 name
//! R  rows: u32, then per row one cell per column of the H frame, in its order
//! E  UTF-8 message: why the file could not be read
//! D  empty: every row was sent
//! ```
//!
//! A cell is a tag byte and its value: `0` null, `1` string (`len: u32` + UTF-8 bytes),
//! `2` integer (`i64`), `3` float (`f64` bits), `4` false, `5` true. Integers, floats and
//! lengths are little endian. The stream is always `H` then `R`… then `D`, or `E` at any
//! point; anything else (a frame cut short because the worker died) is an error at the
//! reading end.

use std::borrow::Cow;
use std::io::{self, Read, Write};

use anyhow::{bail, Context, Result};

use super::super::fields::Scalar;

/// A frame's kind, its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Header = b'H' as isize,
    Rows = b'R' as isize,
    Error = b'E' as isize,
    Done = b'D' as isize,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        [Kind::Header, Kind::Rows, Kind::Error, Kind::Done]
            .into_iter()
            .find(|kind| *kind as u8 == byte)
    }
}

/// Rows frames are cut at the first row boundary past this size: big enough that the
/// per-frame cost vanishes, small enough that a frame in flight (one being written, one
/// being read, one queued) costs a few megabytes.
pub const ROWS_FRAME_BYTES: usize = 4 << 20;

/// The most reserved for a frame before its bytes arrive: a whole rows frame, so that
/// reading one copies it once.
const RESERVE_MAX: u64 = 2 * ROWS_FRAME_BYTES as u64;

const NULL: u8 = 0;
const STR: u8 = 1;
const INT: u8 = 2;
const FLOAT: u8 = 3;
const FALSE: u8 = 4;
const TRUE: u8 = 5;

/// Writes one frame.
pub fn write_frame(out: &mut impl Write, kind: Kind, payload: &[u8]) -> Result<()> {
    let len = u32::try_from(payload.len())
        .context("a frame of the Parquet worker is larger than 4 GiB")?;
    out.write_all(&[kind as u8])?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(payload)?;
    Ok(())
}

/// The payload of an `H` frame.
pub fn header(rows: u64, columns: &[&str]) -> Vec<u8> {
    let mut payload = rows.to_le_bytes().to_vec();
    payload.extend_from_slice(&(columns.len() as u16).to_le_bytes());
    for name in columns {
        payload.extend_from_slice(&(name.len() as u16).to_le_bytes());
        payload.extend_from_slice(name.as_bytes());
    }
    payload
}

/// Appends one cell to the payload of an `R` frame.
pub fn push_cell(payload: &mut Vec<u8>, cell: Option<&Scalar<'_>>) -> Result<()> {
    match cell {
        None => payload.push(NULL),
        Some(Scalar::Str(s)) => {
            let len = u32::try_from(s.len()).context("a string cell is larger than 4 GiB")?;
            payload.push(STR);
            payload.extend_from_slice(&len.to_le_bytes());
            payload.extend_from_slice(s.as_bytes());
        }
        Some(Scalar::Int(i)) => {
            payload.push(INT);
            payload.extend_from_slice(&i.to_le_bytes());
        }
        Some(Scalar::Float(f)) => {
            payload.push(FLOAT);
            payload.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Some(Scalar::Bool(b)) => payload.push(if *b { TRUE } else { FALSE }),
    }
    Ok(())
}

/// Reads the next frame into `payload`; `None` at the end of the stream (before a frame's
/// first byte). A frame cut short is an error.
pub fn read_frame(input: &mut impl Read, payload: &mut Vec<u8>) -> Result<Option<Kind>> {
    let mut head = [0u8; 5];
    match input.read(&mut head[..1])? {
        0 => return Ok(None),
        _ => input.read_exact(&mut head[1..])?,
    }
    let kind =
        Kind::from_byte(head[0]).with_context(|| format!("unknown frame kind {:#04x}", head[0]))?;
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as u64;
    payload.clear();
    // Reserved up to a bound, then grown as the bytes arrive: a length is trusted only as
    // far as the bytes behind it.
    payload.reserve(len.min(RESERVE_MAX) as usize);
    let got = input.by_ref().take(len).read_to_end(payload)?;
    if got as u64 != len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok(Some(kind))
}

/// A cursor over a payload; every read checks its bounds.
pub struct Cursor<'p> {
    bytes: &'p [u8],
}

impl<'p> Cursor<'p> {
    pub fn new(bytes: &'p [u8]) -> Cursor<'p> {
        Cursor { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'p [u8]> {
        if self.bytes.len() < n {
            bail!("a frame of the Parquet worker ends too early");
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn str(&mut self, len: usize) -> Result<&'p str> {
        std::str::from_utf8(self.take(len)?).context("a string of the Parquet worker is not UTF-8")
    }

    /// The next cell of an `R` frame.
    pub fn cell(&mut self) -> Result<Option<Scalar<'p>>> {
        let [tag] = self.array()?;
        Ok(match tag {
            NULL => None,
            STR => {
                let len = self.u32()? as usize;
                Some(Scalar::Str(Cow::Borrowed(self.str(len)?)))
            }
            INT => Some(Scalar::Int(i64::from_le_bytes(self.array()?))),
            FLOAT => Some(Scalar::Float(f64::from_bits(self.u64()?))),
            FALSE => Some(Scalar::Bool(false)),
            TRUE => Some(Scalar::Bool(true)),
            other => bail!("unknown cell tag {other:#04x}"),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// An `H` frame read back: the rows in the file and the columns each row holds.
pub fn read_header(payload: &[u8]) -> Result<(u64, Vec<&str>)> {
    let mut cursor = Cursor::new(payload);
    let rows = cursor.u64()?;
    let count = cursor.u16()?;
    let columns = (0..count)
        .map(|_| {
            let len = cursor.u16()? as usize;
            cursor.str(len)
        })
        .collect::<Result<_>>()?;
    Ok((rows, columns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_and_frame_reads_back_as_written() {
        let cells = [
            None,
            Some(Scalar::Str(Cow::Borrowed("op-ü\u{1b}"))),
            Some(Scalar::Str(Cow::Borrowed(""))),
            Some(Scalar::Int(i64::MIN)),
            Some(Scalar::Float(-0.0)),
            Some(Scalar::Float(f64::NAN)),
            Some(Scalar::Bool(false)),
            Some(Scalar::Bool(true)),
        ];
        let mut rows = 2u32.to_le_bytes().to_vec();
        for cell in cells.iter().chain(&cells) {
            push_cell(&mut rows, cell.as_ref()).unwrap();
        }
        let mut stream = Vec::new();
        write_frame(&mut stream, Kind::Header, &header(2, &["a", "bé"])).unwrap();
        write_frame(&mut stream, Kind::Rows, &rows).unwrap();
        write_frame(&mut stream, Kind::Done, &[]).unwrap();

        let mut input = stream.as_slice();
        let mut payload = Vec::new();
        assert_eq!(
            read_frame(&mut input, &mut payload).unwrap(),
            Some(Kind::Header)
        );
        assert_eq!(read_header(&payload).unwrap(), (2, vec!["a", "bé"]));
        assert_eq!(
            read_frame(&mut input, &mut payload).unwrap(),
            Some(Kind::Rows)
        );
        let mut cursor = Cursor::new(&payload);
        assert_eq!(cursor.u32().unwrap(), 2);
        for expected in cells.iter().chain(&cells) {
            let got = cursor.cell().unwrap();
            // Compared through Debug: NaN is not equal to itself.
            assert_eq!(format!("{got:?}"), format!("{expected:?}"));
        }
        assert!(cursor.is_empty());
        assert_eq!(
            read_frame(&mut input, &mut payload).unwrap(),
            Some(Kind::Done)
        );
        assert_eq!(read_frame(&mut input, &mut payload).unwrap(), None);
    }

    #[test]
    fn a_stream_cut_inside_a_frame_or_a_cell_is_an_error_never_a_panic() {
        let mut rows = 1u32.to_le_bytes().to_vec();
        push_cell(&mut rows, Some(&Scalar::Str(Cow::Borrowed("operation")))).unwrap();
        let mut stream = Vec::new();
        write_frame(&mut stream, Kind::Rows, &rows).unwrap();
        for cut in 1..stream.len() {
            let mut input = &stream[..cut];
            assert!(
                read_frame(&mut input, &mut Vec::new()).is_err(),
                "cut {cut}"
            );
        }
        for cut in 4..rows.len() {
            let mut cursor = Cursor::new(&rows[..cut]);
            cursor.u32().unwrap();
            assert!(cursor.cell().is_err(), "cut {cut}");
        }
        assert!(read_frame(&mut &b"X\0\0\0\0"[..], &mut Vec::new()).is_err());
        assert!(Cursor::new(&[9]).cell().is_err());
    }
}
