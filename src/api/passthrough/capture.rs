//! Write-through: the body of a PutObject copied as it streams upstream, within the memory
//! budget, so the cache can admit it once the upstream confirms the write.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use parking_lot::Mutex;

use crate::BoxError;
use crate::budget::Charge;
use crate::upstream::{Payload, UpstreamBody};

/// The bytes of a body as they pass, for write-through; dropped if the body fails. They
/// are charged to the memory budget until the last clone of the capture is dropped.
#[derive(Clone)]
pub(super) struct Capture {
    pieces: Arc<Mutex<Option<Vec<Bytes>>>>,
    _charge: Arc<Charge>,
}

impl Capture {
    pub(super) fn new(charge: Charge) -> Self {
        Self {
            pieces: Arc::new(Mutex::new(Some(Vec::new()))),
            _charge: Arc::new(charge),
        }
    }

    pub(super) fn tee(&self, payload: Payload) -> Payload {
        match payload {
            Payload::Empty => Payload::Empty,
            Payload::Plain(body, length) => Payload::Plain(self.wrap(body), length),
            Payload::AwsChunked(body, length) => Payload::AwsChunked(self.wrap(body), length),
        }
    }

    fn wrap(&self, body: UpstreamBody) -> UpstreamBody {
        Tee {
            inner: body,
            capture: self.clone(),
        }
        .boxed()
    }

    pub(super) fn take(&self) -> Option<Vec<Bytes>> {
        self.pieces.lock().take()
    }
}

pub(super) struct Tee {
    inner: UpstreamBody,
    capture: Capture,
}

impl Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Some(pieces) = self.capture.pieces.lock().as_mut()
                {
                    pieces.push(data.clone());
                }
            }
            Poll::Ready(Some(Err(_))) => {
                self.capture.pieces.lock().take();
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
