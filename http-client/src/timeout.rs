//! A response body that fails when no data arrives for a while: the SDK's read timeout,
//! and the guard against an upstream that stalls mid-body.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
#[error("no response data for {0:?}")]
pub struct IdleTimeout(pub Duration);

pin_project_lite::pin_project! {
    /// `inner`, failing with [`IdleTimeout`] when a frame takes longer than `idle` to come.
    pub struct IdleTimeoutBody<B> {
        #[pin]
        inner: B,
        idle: Option<Duration>,
        // Allocated once, re-armed whenever a wait for the next frame begins.
        deadline: Option<Pin<Box<Sleep>>>,
        armed: bool,
    }
}

impl<B> IdleTimeoutBody<B> {
    pub fn new(inner: B, idle: Option<Duration>) -> Self {
        Self {
            inner,
            idle,
            deadline: None,
            armed: false,
        }
    }
}

impl<B> Body for IdleTimeoutBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            *this.armed = false;
            return Poll::Ready(frame.map(|result| result.map_err(Into::into)));
        }
        let Some(idle) = *this.idle else {
            return Poll::Pending;
        };
        let until = Instant::now() + idle;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        if !*this.armed {
            deadline.as_mut().reset(until);
            *this.armed = true;
        }
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(IdleTimeout(idle)))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_longer_than_the_idle_timeout_fails() {
        let (mut sender, body) = http_body_util::channel::Channel::<Bytes, BoxError>::new(1);
        let mut body = IdleTimeoutBody::new(body, Some(Duration::from_secs(5)));
        sender.send_data(Bytes::from_static(b"a")).await.unwrap();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "a");
        tokio::time::advance(Duration::from_secs(4)).await;
        sender.send_data(Bytes::from_static(b"b")).await.unwrap();
        assert!(
            body.frame().await.unwrap().is_ok(),
            "a frame within the window passes"
        );
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(error.is::<IdleTimeout>(), "{error}");
    }
}
