//! A request body whose SHA-256 the client signed (`x-amz-content-sha256: <hex>`), checked
//! as it streams.
//!
//! Invariant: the last piece of the body is held back until the digest has been compared,
//! so a body that does not match never reaches the upstream as a complete request.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use sha2::{Digest, Sha256};

use super::chunked::{BodyError, ErrorSlot};
use crate::upstream::BoxError;

pub struct Sha256Body<B> {
    inner: B,
    hasher: Sha256,
    expected: String,
    held: Option<Bytes>,
    /// The body ended and matched: only the held piece is left to send.
    verified: bool,
    failed: bool,
    errors: ErrorSlot,
}

impl<B> Sha256Body<B> {
    /// Checks that `inner` hashes to `expected` (lower-case hex).
    pub fn new(inner: B, expected: String, errors: ErrorSlot) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            expected,
            held: None,
            verified: false,
            failed: false,
            errors,
        }
    }

    fn fail(&mut self, error: BodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.failed = true;
        self.held = None;
        self.errors.set(error.clone());
        Poll::Ready(Some(Err(error.into())))
    }
}

impl<B> Body for Sha256Body<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        loop {
            if self.verified {
                return Poll::Ready(self.held.take().map(|data| Ok(Frame::data(data))));
            }
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    self.hasher.update(&data);
                    if let Some(previous) = self.held.replace(data) {
                        return Poll::Ready(Some(Ok(Frame::data(previous))));
                    }
                }
                Some(Err(error)) => return self.fail(BodyError::Client(error.to_string())),
                None => {
                    let digest = hex::encode(std::mem::take(&mut self.hasher).finalize());
                    if digest != self.expected {
                        return self.fail(BodyError::Sha256Mismatch);
                    }
                    self.verified = true;
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    type Frames = Vec<Result<Frame<Bytes>, std::io::Error>>;

    fn body(
        pieces: &[&'static [u8]],
    ) -> StreamBody<futures::stream::Iter<<Frames as IntoIterator>::IntoIter>> {
        let frames: Frames = pieces
            .iter()
            .map(|piece| Ok(Frame::data(Bytes::from_static(piece))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_matching_body_passes_whole() {
        let expected = hex::encode(Sha256::digest(b"hello world"));
        let checked = Sha256Body::new(
            body(&[b"hello", b" ", b"world"]),
            expected,
            ErrorSlot::default(),
        );
        let bytes = checked.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello world");
    }

    #[tokio::test]
    async fn a_mismatching_body_never_yields_its_last_piece() {
        let expected = hex::encode(Sha256::digest(b"something else"));
        let errors = ErrorSlot::default();
        let mut checked = Sha256Body::new(body(&[b"hello", b" world"]), expected, errors.clone());
        let mut passed = Vec::new();
        while let Some(frame) = checked.frame().await {
            match frame {
                Ok(frame) => passed.extend_from_slice(&frame.into_data().unwrap()),
                Err(_) => break,
            }
        }
        assert_eq!(passed, b"hello", "the last piece is held back");
        assert_eq!(errors.get(), Some(BodyError::Sha256Mismatch));
    }
}
