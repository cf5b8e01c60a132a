//! What a source answers with: the bytes of a range with the metadata that came with
//! them (whole or streamed), a HEAD's outcome, and when a response head arrived.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};

use super::UpstreamError;
use crate::object::ObjectMeta;

/// When a request's successful response head arrived: hedging looks at time to first
/// byte, not at a transfer the local machine may be slow to take in, and a GET waits
/// until the version of each block it started is settled (see `read/get.rs`). Only an
/// answer that will send the bytes asked for arrives: an error answer never does. Cheap
/// to clone.
#[derive(Debug, Clone, Default)]
pub struct ResponseHead(Arc<HeadArrival>);

#[derive(Debug, Default)]
struct HeadArrival {
    at: std::sync::OnceLock<tokio::time::Instant>,
    notify: tokio::sync::Notify,
}

impl ResponseHead {
    pub(crate) fn arrived(&self) {
        if self.0.at.set(tokio::time::Instant::now()).is_ok() {
            self.0.notify.notify_waiters();
        }
    }

    /// Whether `other` is this very latch (a clone of it).
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// When the head arrived, if it has.
    pub fn at(&self) -> Option<tokio::time::Instant> {
        self.0.at.get().copied()
    }

    /// Returns once the head has arrived (at once if it has).
    pub async fn wait(&self) {
        let notified = self.0.notify.notified();
        tokio::pin!(notified);
        // Registered before the check, so an arrival between the two is not missed.
        notified.as_mut().enable();
        if self.at().is_none() {
            notified.await;
        }
    }
}

/// Bytes read from an object with the metadata that came with them.
#[derive(Debug, Clone)]
pub struct RangeRead {
    pub meta: ObjectMeta,
    /// Offset of the first byte of `body` within the object.
    pub first: u64,
    pub body: Bytes,
}

/// A ranged GET read as its bytes arrive: exactly `length` bytes from offset `first`.
pub struct StreamedRead {
    pub meta: ObjectMeta,
    pub first: u64,
    pub length: u64,
    body: BoxStream<'static, Result<Bytes, UpstreamError>>,
    received: u64,
}

impl StreamedRead {
    /// `length` bytes from offset `first` of the object `meta` describes, as `body`
    /// yields them.
    pub fn new(
        meta: ObjectMeta,
        first: u64,
        length: u64,
        body: impl Stream<Item = Result<Bytes, UpstreamError>> + Send + 'static,
    ) -> Self {
        Self {
            meta,
            first,
            length,
            body: body.boxed(),
            received: 0,
        }
    }

    /// The next part of the body; `None` once exactly `length` bytes have arrived. A body
    /// that breaks off, ends early or runs long is an error.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        let Some(chunk) = self.body.next().await else {
            return (self.received != self.length).then(|| {
                Err(UpstreamError::unreachable(format!(
                    "response body ended after {} of {} bytes",
                    self.received, self.length
                )))
            });
        };
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(error) => return Some(Err(error)),
        };
        self.received += chunk.len() as u64;
        if self.received > self.length {
            return Some(Err(UpstreamError::invalid_response(
                "response body longer than its Content-Length",
            )));
        }
        Some(Ok(chunk))
    }
}

/// Which version a HEAD answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadIf<'a> {
    /// The version the upstream holds now.
    Current,
    /// The version the upstream holds now, for a caller that knows the version with this
    /// ETag: it takes whatever the upstream reports, headers included (a copy onto itself
    /// keeps the ETag and changes them), and a fallback, which may hold another copy,
    /// answers only for the known version.
    Known(&'a str),
    /// `If-None-Match`: the version with this ETag answers [`HeadOutcome::NotModified`].
    Changed(&'a str),
    /// `If-Match`: only the version with this ETag; another fails with
    /// [`super::UpstreamError::PreconditionFailed`].
    Only(&'a str),
}

impl<'a> HeadIf<'a> {
    /// The `If-None-Match` and `If-Match` the upstream is asked with.
    pub fn at_the_upstream(self) -> (Option<&'a str>, Option<&'a str>) {
        match self {
            Self::Current | Self::Known(_) => (None, None),
            Self::Changed(etag) => (Some(etag), None),
            Self::Only(etag) => (None, Some(etag)),
        }
    }

    /// The version a fallback must answer for (`If-Match`), if any is known.
    pub fn at_a_fallback(self) -> Option<&'a str> {
        match self {
            Self::Current => None,
            Self::Known(etag) | Self::Changed(etag) | Self::Only(etag) => Some(etag),
        }
    }
}

#[derive(Debug, Clone)]
pub enum HeadOutcome {
    Found(Box<ObjectMeta>),
    /// The ETag given as `If-None-Match` still matches.
    NotModified,
}
