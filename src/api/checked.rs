//! Request bodies checked as they stream: [`Sha256Body`] compares the body with its signed
//! `x-amz-content-sha256`, and [`HoldLast`] keeps the last piece of a checked body (this
//! one, or a decoded `aws-chunked` body) back until the check has passed.
//!
//! Invariant: a body under [`HoldLast`] whose check fails never reaches the upstream
//! complete: upstream requests have a fixed length, and the last bytes never leave.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use sha2::{Digest, Sha256};

use super::chunked::{BodyError, ErrorSlot};
use crate::BoxError;

/// Passes `inner` on, holding its latest data piece until the next one arrives, and the
/// last one until `inner` ended without an error (a trailers frame is its last word).
pub struct HoldLast<B> {
    inner: B,
    held: Option<Bytes>,
    /// `inner` ended well: only the held piece and these trailers are left to send.
    ended: Option<Option<Frame<Bytes>>>,
}

impl<B> HoldLast<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            held: None,
            ended: None,
        }
    }
}

impl<B> Body for HoldLast<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(trailers) = this.ended.as_mut() {
                let next = match this.held.take() {
                    Some(data) => Some(Frame::data(data)),
                    None => trailers.take(),
                };
                return Poll::Ready(next.map(Ok));
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        if let Some(previous) = this.held.replace(data) {
                            return Poll::Ready(Some(Ok(Frame::data(previous))));
                        }
                    }
                    Err(trailers) => this.ended = Some(Some(trailers)),
                },
                Some(Err(error)) => {
                    this.held = None;
                    return Poll::Ready(Some(Err(error)));
                }
                None => this.ended = Some(None),
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body whose SHA-256 the client signed; a mismatch ends it with an error.
pub struct Sha256Body<B> {
    inner: B,
    hasher: Sha256,
    expected: String,
    errors: ErrorSlot,
}

impl<B> Sha256Body<B> {
    /// Checks that `inner` hashes to `expected` (lower-case hex).
    pub fn new(inner: B, expected: String, errors: ErrorSlot) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            expected,
            errors,
        }
    }
}

impl<B> Body for Sha256Body<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    self.hasher.update(data);
                }
            }
            Some(Err(_)) => {}
            None => {
                let digest = hex::encode(std::mem::take(&mut self.hasher).finalize());
                if digest != self.expected {
                    self.errors.set(BodyError::Sha256Mismatch);
                    return Poll::Ready(Some(Err(BodyError::Sha256Mismatch.into())));
                }
            }
        }
        Poll::Ready(polled)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    type Frames = Vec<Result<Frame<Bytes>, BoxError>>;

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
        let checked = HoldLast::new(Sha256Body::new(
            body(&[b"hello", b" ", b"world"]),
            expected,
            ErrorSlot::default(),
        ));
        let bytes = checked.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello world");
    }

    #[tokio::test]
    async fn a_mismatching_body_never_yields_its_last_piece() {
        let expected = hex::encode(Sha256::digest(b"something else"));
        let errors = ErrorSlot::default();
        let mut checked = HoldLast::new(Sha256Body::new(
            body(&[b"hello", b" world"]),
            expected,
            errors.clone(),
        ));
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
