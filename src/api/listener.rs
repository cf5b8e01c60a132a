//! The S3 listener: accepts connections up to `max_connections` (and
//! `max_connections_per_client` from one address), terminates TLS when configured, and
//! serves HTTP/1.1 and HTTP/2 with the slow-client guards — a deadline for the TLS
//! handshake and the request header section, an idle timeout that closes a connection
//! moving no bytes, and a keep-alive timeout that closes one with no request open (bytes
//! alone, such as HTTP/2 PINGs, do not keep it). Shutdown stops accepting, then gives open
//! requests the grace period.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::Front;
use super::drain::{Closing, Drain, Lingering};
use super::tls::ServerTls;
use crate::BoxError;
use crate::config::ServerConfig;
use crate::shutdown::Shutdown;

/// Connection-level limits, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// 0: no per-client cap.
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub keepalive_timeout: Duration,
}

impl ConnectionLimits {
    pub fn of(config: &ServerConfig) -> Self {
        Self {
            max_connections: config.max_connections as usize,
            max_connections_per_client: config.max_connections_per_client as usize,
            header_read_timeout: config.header_read_timeout.get(),
            idle_timeout: config.idle_timeout.get(),
            keepalive_timeout: config.keepalive_timeout.get(),
        }
    }
}

/// Open connections per client address, capped.
struct PerClient {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a client address; closing it frees its place.
struct ClientSlot {
    clients: Arc<PerClient>,
    address: IpAddr,
}

impl PerClient {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `address`, unless it holds its cap already.
    /// An IPv4 client seen through an IPv6 socket counts as its IPv4 address.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Option<ClientSlot> {
        let address = address.to_canonical();
        let mut open = self.open.lock();
        let count = open.entry(address).or_insert(0);
        if self.limit > 0 && *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            address,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock();
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Serves S3 on `listener` until `shutdown` fires, then lets open requests finish for up
/// to `grace`.
pub async fn serve(
    listener: TcpListener,
    front: Front,
    tls: Option<ServerTls>,
    limits: ConnectionLimits,
    shutdown: Shutdown,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let clients = PerClient::new(limits.max_connections_per_client);
    let metrics = front.metrics();
    let drain = Drain::new();
    loop {
        // A free slot first: at the limit, new clients wait in the kernel's backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.fired() => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.fired() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Typically EMFILE: back off instead of spinning on accept.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(client_slot) = clients.admit(peer.ip()) else {
            tracing::debug!(%peer, limit = limits.max_connections_per_client, "connection refused: the client holds its share of connections");
            metrics.count_refused_connection("per_client");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let requests = Arc::new(Requests::new());
        let connection = Connection {
            builder: builder.clone(),
            front: front.for_connection(requests.clone()),
            watcher: graceful.watcher(),
            limits,
            requests,
            drain: drain.clone(),
        };
        let tls = tls.clone();
        let open = metrics.connections_open.clone();
        open.inc();
        tokio::spawn(async move {
            let _open = OpenConnection(open);
            let result = match tls {
                Some(tls) => connection.serve_tls(stream, &tls).await,
                None => connection.serve(stream).await,
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop((slot, client_slot));
        });
    }
    drop(listener);
    drain.begin(grace);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("S3 listener drained"),
        () = tokio::time::sleep(grace) => tracing::warn!(?grace, "S3 connections still open after the grace period; closing them"),
    }
    // What the last responses left in their sockets' send queues reaches their clients.
    drain.finish().await;
}

/// Counts its connection in `portico_connections_open` until the connection ends.
struct OpenConnection(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    front: Front,
    watcher: Watcher,
    limits: ConnectionLimits,
    requests: Arc<Requests>,
    drain: Arc<Drain>,
}

impl Connection {
    async fn serve_tls(self, stream: TcpStream, tls: &ServerTls) -> Result<(), BoxError> {
        // The handshake is part of what a client must finish within the header deadline.
        let handshake = tls.acceptor().accept(stream);
        let stream = tokio::time::timeout(self.limits.header_read_timeout, handshake)
            .await
            .map_err(|_| "TLS handshake not finished within the header read timeout")??;
        self.serve(stream).await
    }

    async fn serve<I>(self, stream: I) -> Result<(), BoxError>
    where
        I: AsyncRead + AsyncWrite + Lingering + Unpin,
    {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(ActivityIo {
            inner: Closing::new(stream, self.drain.clone()),
            activity: activity.clone(),
        });
        let connection = self.builder.serve_connection(io, self.front).into_owned();
        let connection = self.watcher.watch(connection);
        tokio::select! {
            result = connection => result,
            () = activity.idle_for(self.limits.idle_timeout) => {
                Err(format!("closed after {:?} without traffic", self.limits.idle_timeout).into())
            }
            () = self.requests.none_open_for(self.limits.keepalive_timeout) => {
                Err(format!("closed after {:?} without a request", self.limits.keepalive_timeout).into())
            }
        }
    }
}

/// The requests a connection has open (their responses not yet finished), and when that
/// last changed, in milliseconds since the connection opened.
pub struct Requests {
    opened: Instant,
    open: AtomicUsize,
    changed_millis: AtomicU64,
}

impl Requests {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            open: AtomicUsize::new(0),
            changed_millis: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let millis = self.opened.elapsed().as_millis() as u64;
        self.changed_millis.store(millis, Ordering::Relaxed);
    }

    /// A request arrived; it stays open until the guard (held by its response) drops.
    pub fn started(self: &Arc<Self>) -> OpenRequest {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.touch();
        OpenRequest(self.clone())
    }

    /// Resolves once no request has been open for `keepalive`.
    async fn none_open_for(&self, keepalive: Duration) {
        loop {
            let changed =
                self.opened + Duration::from_millis(self.changed_millis.load(Ordering::Relaxed));
            let deadline = changed + keepalive;
            if self.open.load(Ordering::Acquire) > 0 {
                // The last request to finish moves the deadline: look again after one
                // keep-alive period.
                tokio::time::sleep(keepalive).await;
            } else if Instant::now() >= deadline {
                return;
            } else {
                tokio::time::sleep_until(deadline).await;
            }
        }
    }
}

/// One open request of a connection.
pub struct OpenRequest(Arc<Requests>);

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.touch();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When a connection last moved a byte, in milliseconds since it opened.
struct Activity {
    opened: Instant,
    last_millis: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            last_millis: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let millis = self.opened.elapsed().as_millis() as u64;
        self.last_millis.store(millis, Ordering::Relaxed);
    }

    /// Resolves once no byte has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last =
                self.opened + Duration::from_millis(self.last_millis.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records in [`Activity`] every read or write that moved bytes.
struct ActivityIo<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for ActivityIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ActivityIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn one_client_address_holds_at_most_its_cap() {
        let clients = PerClient::new(2);
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let first = clients.admit(one).unwrap();
        let _second = clients
            .admit(mapped)
            .expect("the same client, seen over IPv6");
        assert!(clients.admit(one).is_none());
        assert!(
            clients.admit(other).is_some(),
            "other clients are not affected"
        );
        drop(first);
        assert!(
            clients.admit(one).is_some(),
            "a closed connection frees its place"
        );
        let unlimited = PerClient::new(0);
        let held: Vec<_> = (0..100).map(|_| unlimited.admit(one).unwrap()).collect();
        assert_eq!(held.len(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_an_open_request_expires_whatever_else_it_sends() {
        let requests = Arc::new(Requests::new());
        let keepalive = Duration::from_secs(30);
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(20)).await;
        let request = requests.started();
        // A request open for longer than the keep-alive keeps the connection.
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(request);
        requests.none_open_for(keepalive).await;
        assert_eq!(started.elapsed(), Duration::from_secs(150));
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_postpones_the_idle_deadline() {
        let (client, server) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::new());
        let mut io = ActivityIo {
            inner: server,
            activity: activity.clone(),
        };
        let idle = Duration::from_secs(10);
        let mut client = client;
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(8)).await;
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        io.read_exact(&mut buf).await.unwrap();
        activity.idle_for(idle).await;
        assert_eq!(started.elapsed(), Duration::from_secs(18));
    }
}
