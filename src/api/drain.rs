//! The last bytes of responses when Portico stops. A response is complete, for the
//! server, once its last byte is in the socket's send queue; the client may not have it
//! yet. Once the process exits, its sockets go with its network namespace in a container
//! (a pod's goes when its last container stops), and the client of a read in flight when
//! SIGTERM came was reset a few MiB before the end. So while stopping, each connection's
//! socket is closed on a blocking thread with `SO_LINGER` set to what is left of the
//! grace period: the close returns once the client has acknowledged everything sent, and
//! the listener's drain waits for every such close, up to the end of the grace period.
//!
//! Invariant: outside a stop, a connection's socket is closed at once, as before.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::task::TaskTracker;

/// A connection's stream, whose TCP socket can linger on close.
pub(super) trait Lingering: Send + 'static {
    fn tcp(&self) -> &TcpStream;
}

impl Lingering for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Lingering for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// The closes of one listener's connections.
#[derive(Default)]
pub(super) struct Drain {
    /// The end of the grace period, once the listener stops.
    until: OnceLock<Instant>,
    closes: TaskTracker,
}

impl Drain {
    pub(super) fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The listener stops: connections closed from now on linger, up to `grace` from now.
    pub(super) fn begin(&self, grace: Duration) {
        let _ = self.until.set(Instant::now() + grace);
    }

    /// Closes `stream`: at once, or, while stopping, once its client acknowledged what
    /// was sent (see the module's documentation).
    fn close<S: Lingering>(&self, stream: S) {
        let Some(until) = self.until.get() else {
            return;
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        self.closes.spawn_blocking(move || {
            // SO_LINGER counts whole seconds; a close that returns early costs nothing.
            let seconds = Duration::from_secs(left.as_secs_f64().ceil() as u64);
            if let Err(error) = SockRef::from(stream.tcp()).set_linger(Some(seconds)) {
                tracing::debug!(%error, "a closing connection could not linger");
            }
            drop(stream);
        });
    }

    /// Waits until every lingering close returned, or the grace period ended.
    pub(super) async fn finish(&self) {
        self.closes.close();
        let Some(until) = self.until.get() else {
            return;
        };
        let until = tokio::time::Instant::from_std(*until);
        if tokio::time::timeout_at(until, self.closes.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "connections still sending their last bytes at the end of the grace period"
            );
        }
    }
}

/// A connection's stream, closed through its listener's [`Drain`] when dropped.
pub(super) struct Closing<I: Lingering> {
    /// `None` once closed.
    inner: Option<I>,
    drain: Arc<Drain>,
}

impl<I: Lingering> Closing<I> {
    pub(super) fn new(inner: I, drain: Arc<Drain>) -> Self {
        Self {
            inner: Some(inner),
            drain,
        }
    }
}

impl<I: Lingering + Unpin> Closing<I> {
    fn inner(&mut self) -> io::Result<Pin<&mut I>> {
        match self.inner.as_mut() {
            Some(inner) => Ok(Pin::new(inner)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl<I: Lingering> Drop for Closing<I> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.drain.close(inner);
        }
    }
}

impl<I: AsyncRead + Lingering + Unpin> AsyncRead for Closing<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.inner() {
            Ok(inner) => inner.poll_read(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

impl<I: AsyncWrite + Lingering + Unpin> AsyncWrite for Closing<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.inner() {
            Ok(inner) => inner.poll_write(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.inner() {
            Ok(inner) => inner.poll_write_vectored(cx, bufs),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.inner() {
            Ok(inner) => inner.poll_flush(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.inner() {
            Ok(inner) => inner.poll_shutdown(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// While stopping, the listener's drain waits until a closed connection's client has
    /// read what its send queue held; it then reads every byte, and the end of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_closed_while_stopping_lingers_until_its_client_has_it_all() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        // The send queue and the client's receive buffer full, the client reading nothing.
        let mut sent = 0;
        loop {
            server.writable().await.unwrap();
            match server.try_write(&[7; 64 * 1024]) {
                Ok(written) => sent += written,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => panic!("{error}"),
            }
        }
        let drain = Drain::new();
        drain.begin(Duration::from_secs(20));
        drop(Closing::new(server, drain.clone()));
        let mut finished = tokio::spawn(async move { drain.finish().await });
        let waiting = tokio::time::timeout(Duration::from_millis(300), &mut finished).await;
        assert!(
            waiting.is_err(),
            "the drain waits while the client reads nothing"
        );
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), sent, "every byte sent, then the end");
        tokio::time::timeout(Duration::from_secs(10), finished)
            .await
            .expect("the drain ends once the client has it all")
            .unwrap();
    }
}
