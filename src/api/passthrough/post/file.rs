//! A form's file held to its policy's length range as it streams, and the form ended
//! with it (what the client sends after the file becomes a blank epilogue).

use std::ops::RangeInclusive;

use bytes::{Bytes, BytesMut};

use super::find;
use crate::BoxError;
use crate::api::chunked::{BodyError, ErrorSlot};

type Chunks = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, BoxError>> + Send + Sync>>;

/// Holds a form's file to its policy's `content-length-range` as it streams, and ends the
/// form with it. The file's bytes are counted up to the delimiter that ends its part, and
/// the bytes that may hold that delimiter are held back until it is found, so the upstream
/// never receives a whole form whose file is out of range: the stream ends with an error
/// instead (recorded in `errors`), and the upstream stores nothing. What the client sends
/// after the file (S3 ignores fields there, unchecked by any policy) goes on as the form's
/// epilogue: the delimiter is closed (`--`) and the rest is blanked, byte for byte, so the
/// length announced to the upstream holds.
pub(super) struct FileLength {
    delimiter: Vec<u8>,
    least: u64,
    most: u64,
    held: BytesMut,
    /// File bytes passed on so far.
    passed: u64,
    /// The file's end was found and its length was in range.
    ended: bool,
    /// Bytes after the file's end delimiter passed on so far.
    after: u64,
    errors: ErrorSlot,
}

impl FileLength {
    /// Holds a file delimited by `boundary` to `length` bytes, reporting why it stopped
    /// in `errors`.
    pub(super) fn new(boundary: &str, length: RangeInclusive<u64>, errors: ErrorSlot) -> Self {
        Self {
            delimiter: format!("\r\n--{boundary}").into_bytes(),
            least: *length.start(),
            most: *length.end(),
            held: BytesMut::new(),
            passed: 0,
            ended: false,
            after: 0,
            errors,
        }
    }

    /// The bytes that may go on once `chunk` arrived, or why the form must stop.
    pub(super) fn pass(&mut self, chunk: Bytes) -> Result<Bytes, BodyError> {
        if self.ended {
            return Ok(self.epilogue(chunk.len()));
        }
        self.held.extend_from_slice(&chunk);
        if let Some(at) = find(&self.held, &self.delimiter) {
            let length = self.passed + at as u64;
            if length > self.most {
                return Err(BodyError::EntityTooLarge);
            }
            if length < self.least {
                return Err(BodyError::EntityTooSmall);
            }
            self.ended = true;
            let mut out = self.held.split_to(at + self.delimiter.len());
            let rest = self.held.split().len();
            out.extend_from_slice(&self.epilogue(rest));
            return Ok(out.freeze());
        }
        let sendable = self.held.len().saturating_sub(self.delimiter.len() - 1);
        self.passed += sendable as u64;
        if self.passed > self.most {
            return Err(BodyError::EntityTooLarge);
        }
        Ok(self.held.split_to(sendable).freeze())
    }

    /// What goes on in place of the next `length` bytes after the file's end delimiter:
    /// `--` closes it, then a line end, then blanks.
    fn epilogue(&mut self, length: usize) -> Bytes {
        let bytes = (self.after..self.after + length as u64)
            .map(|at| match at {
                0 | 1 => b'-',
                2 => b'\r',
                3 => b'\n',
                _ => b' ',
            })
            .collect::<Vec<u8>>();
        self.after += length as u64;
        Bytes::from(bytes)
    }

    /// `file`, held to the length range.
    pub(super) fn limit(
        self,
        file: impl futures::Stream<Item = Result<Bytes, BoxError>> + Send + Sync + 'static,
    ) -> Chunks {
        let state = (Box::pin(file), Some(self));
        Box::pin(futures::stream::unfold(
            state,
            |(mut file, limit)| async move {
                let mut limit = limit?;
                let failed = match futures::StreamExt::next(&mut file).await {
                    Some(Ok(chunk)) => match limit.pass(chunk) {
                        Ok(bytes) => return Some((Ok(bytes), (file, Some(limit)))),
                        Err(error) => error,
                    },
                    Some(Err(error)) => return Some((Err(error), (file, None))),
                    None if limit.ended => return None,
                    None => BodyError::MalformedForm,
                };
                limit.errors.set(failed.clone());
                Some((Err(BoxError::from(failed)), (file, None)))
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_held_to_its_length_range_across_chunk_edges() {
        let form_end = b"\r\n--B--\r\n";
        let run = |file: &[u8], range: (u64, u64), chunk: usize| {
            let mut limit = FileLength::new("B", range.0..=range.1, ErrorSlot::default());
            let whole = [file, form_end.as_slice()].concat();
            let mut passed = Vec::new();
            for piece in whole.chunks(chunk) {
                match limit.pass(Bytes::copy_from_slice(piece)) {
                    Ok(bytes) => passed.extend_from_slice(&bytes),
                    Err(error) => return Err((error, passed.len())),
                }
            }
            assert!(limit.ended, "the file's end is found");
            assert_eq!(passed, whole, "every byte passes, once, in order");
            assert_eq!(limit.after, 4, "the closing `--` and line end");
            Ok(())
        };
        for chunk in [1, 2, 3, 7, 1000] {
            assert!(run(b"0123456789", (10, 10), chunk).is_ok(), "chunk {chunk}");
            assert!(run(b"", (0, 0), chunk).is_ok(), "chunk {chunk}");
            let (error, passed) = run(b"0123456789", (0, 9), chunk).unwrap_err();
            assert!(matches!(error, BodyError::EntityTooLarge), "chunk {chunk}");
            assert!(passed <= 10, "chunk {chunk}: the form's end never passes");
            let (error, passed) = run(b"0123456789", (11, 20), chunk).unwrap_err();
            assert!(matches!(error, BodyError::EntityTooSmall), "chunk {chunk}");
            assert!(passed < 10 + form_end.len(), "chunk {chunk}");
        }
        // A file larger than the range is stopped before its end arrives.
        let mut limit = FileLength::new("B", 0..=100, ErrorSlot::default());
        assert!(limit.pass(Bytes::from(vec![b'x'; 100])).is_ok());
        assert!(matches!(
            limit.pass(Bytes::from(vec![b'x'; 100])),
            Err(BodyError::EntityTooLarge)
        ));
    }

    #[test]
    fn fields_after_the_file_become_a_blank_epilogue_of_the_same_length() {
        let tail = b"0123\r\n--B\r\nContent-Disposition: form-data; name=\"acl\"\r\n\r\npublic-read\r\n--B--\r\n";
        for chunk in [1, 5, 1000] {
            let mut limit = FileLength::new("B", 0..=u64::MAX, ErrorSlot::default());
            let mut passed = Vec::new();
            for piece in tail.chunks(chunk) {
                passed.extend_from_slice(&limit.pass(Bytes::copy_from_slice(piece)).unwrap());
            }
            assert_eq!(passed.len(), tail.len(), "chunk {chunk}: the length holds");
            let closed = b"0123\r\n--B--\r\n";
            assert_eq!(&passed[..closed.len()], closed, "chunk {chunk}");
            assert!(
                passed[closed.len()..].iter().all(|&byte| byte == b' '),
                "chunk {chunk}"
            );
        }
    }
}
