//! The on-disk encoding of cache keys and values for foyer's disk tier.
//!
//! Every record starts with a tag byte; integers are little-endian; strings are a `u32`
//! length then UTF-8 bytes. Decoding rejects unknown tags, invalid UTF-8 and lengths
//! beyond [`MAX_BLOCK_BYTES`], so a damaged entry is a miss, never wrong bytes.

use std::io::{Read, Write};

use bytes::Bytes;

use foyer::{Error, ErrorKind, Result};

/// Upper bound on a decoded block: the largest block size plus slack.
pub const MAX_BLOCK_BYTES: u64 = 64 * 1024 * 1024 + 4096;
/// Upper bound on any decoded string (object keys are at most 1024 bytes; ETags and
/// header values are far below this).
const MAX_STRING_BYTES: u32 = 64 * 1024;
const MAX_METADATA_PAIRS: u32 = 4096;

pub fn parse_error(message: &'static str) -> Error {
    Error::new(ErrorKind::Parse, message)
}

pub fn put_u8(writer: &mut impl Write, value: u8) -> Result<()> {
    writer.write_all(&[value]).map_err(Error::io_error)
}

pub fn put_u32(writer: &mut impl Write, value: u32) -> Result<()> {
    writer
        .write_all(&value.to_le_bytes())
        .map_err(Error::io_error)
}

pub fn put_u64(writer: &mut impl Write, value: u64) -> Result<()> {
    writer
        .write_all(&value.to_le_bytes())
        .map_err(Error::io_error)
}

pub fn put_i64(writer: &mut impl Write, value: i64) -> Result<()> {
    writer
        .write_all(&value.to_le_bytes())
        .map_err(Error::io_error)
}

pub fn put_bytes(writer: &mut impl Write, bytes: &[u8]) -> Result<()> {
    put_u64(writer, bytes.len() as u64)?;
    writer.write_all(bytes).map_err(Error::io_error)
}

pub fn put_str(writer: &mut impl Write, text: &str) -> Result<()> {
    let length = u32::try_from(text.len()).map_err(|_| parse_error("string too long to encode"))?;
    put_u32(writer, length)?;
    writer.write_all(text.as_bytes()).map_err(Error::io_error)
}

pub fn put_opt_str(writer: &mut impl Write, text: Option<&str>) -> Result<()> {
    match text {
        Some(text) => {
            put_u8(writer, 1)?;
            put_str(writer, text)
        }
        None => put_u8(writer, 0),
    }
}

pub fn put_opt_i64(writer: &mut impl Write, value: Option<i64>) -> Result<()> {
    match value {
        Some(value) => {
            put_u8(writer, 1)?;
            put_i64(writer, value)
        }
        None => put_u8(writer, 0),
    }
}

pub fn put_pairs(writer: &mut impl Write, pairs: &[(String, String)]) -> Result<()> {
    let count = u32::try_from(pairs.len()).map_err(|_| parse_error("too many pairs to encode"))?;
    put_u32(writer, count)?;
    for (name, value) in pairs {
        put_str(writer, name)?;
        put_str(writer, value)?;
    }
    Ok(())
}

pub fn get_u8(reader: &mut impl Read) -> Result<u8> {
    let mut buf = [0u8; 1];
    reader.read_exact(&mut buf).map_err(Error::io_error)?;
    Ok(buf[0])
}

pub fn get_u32(reader: &mut impl Read) -> Result<u32> {
    let mut buf = [0u8; 4];
    reader.read_exact(&mut buf).map_err(Error::io_error)?;
    Ok(u32::from_le_bytes(buf))
}

pub fn get_u64(reader: &mut impl Read) -> Result<u64> {
    let mut buf = [0u8; 8];
    reader.read_exact(&mut buf).map_err(Error::io_error)?;
    Ok(u64::from_le_bytes(buf))
}

pub fn get_i64(reader: &mut impl Read) -> Result<i64> {
    let mut buf = [0u8; 8];
    reader.read_exact(&mut buf).map_err(Error::io_error)?;
    Ok(i64::from_le_bytes(buf))
}

/// An encoded block's length, refused beyond [`MAX_BLOCK_BYTES`] before anything is
/// allocated or sliced for it.
fn block_length(length: u64) -> Result<usize> {
    if length > MAX_BLOCK_BYTES {
        return Err(parse_error("encoded block is longer than any block size"));
    }
    // Bounded above by MAX_BLOCK_BYTES, so the cast cannot truncate.
    Ok(length as usize)
}

pub fn get_bytes(reader: &mut impl Read) -> Result<Vec<u8>> {
    let length = get_u64(reader)?;
    // Read into spare capacity: zeroing a block's worth of memory first would cost as
    // much as the copy.
    let mut bytes = Vec::with_capacity(block_length(length)?);
    reader
        .take(length)
        .read_to_end(&mut bytes)
        .map_err(Error::io_error)?;
    if bytes.len() as u64 != length {
        return Err(parse_error("encoded block is shorter than its length"));
    }
    Ok(bytes)
}

/// [`get_bytes`] from an owned buffer at `at`: the bytes are a slice of `buffer`, not a
/// copy. The checks are [`get_bytes`]'s.
pub fn get_bytes_owned(buffer: &Bytes, at: usize) -> Result<Bytes> {
    let header = buffer
        .get(at..at + 8)
        .ok_or_else(|| parse_error("encoded block is shorter than its length"))?;
    let mut raw = [0u8; 8];
    raw.copy_from_slice(header);
    let end = at + 8 + block_length(u64::from_le_bytes(raw))?;
    if buffer.len() < end {
        return Err(parse_error("encoded block is shorter than its length"));
    }
    Ok(buffer.slice(at + 8..end))
}

pub fn get_str(reader: &mut impl Read) -> Result<String> {
    let length = get_u32(reader)?;
    if length > MAX_STRING_BYTES {
        return Err(parse_error("encoded string is implausibly long"));
    }
    let mut bytes = vec![0u8; length as usize];
    reader.read_exact(&mut bytes).map_err(Error::io_error)?;
    String::from_utf8(bytes).map_err(|_| parse_error("encoded string is not UTF-8"))
}

pub fn get_opt_str(reader: &mut impl Read) -> Result<Option<String>> {
    match get_u8(reader)? {
        0 => Ok(None),
        1 => get_str(reader).map(Some),
        _ => Err(parse_error("invalid option tag")),
    }
}

pub fn get_opt_i64(reader: &mut impl Read) -> Result<Option<i64>> {
    match get_u8(reader)? {
        0 => Ok(None),
        1 => get_i64(reader).map(Some),
        _ => Err(parse_error("invalid option tag")),
    }
}

pub fn get_pairs(reader: &mut impl Read) -> Result<Vec<(String, String)>> {
    let count = get_u32(reader)?;
    if count > MAX_METADATA_PAIRS {
        return Err(parse_error("implausible number of metadata pairs"));
    }
    (0..count)
        .map(|_| Ok((get_str(reader)?, get_str(reader)?)))
        .collect()
}

/// Encoded size of a string written by [`put_str`].
pub fn str_size(text: &str) -> usize {
    4 + text.len()
}

/// Encoded size of an optional string written by [`put_opt_str`].
pub fn opt_str_size(text: Option<&str>) -> usize {
    1 + text.map_or(0, str_size)
}
