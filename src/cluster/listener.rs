//! The peer port with mutual TLS: connections are accepted and their handshakes run
//! beside each other, a bounded number at once, and only those that present a member's
//! certificate reach the peer protocol. A plain connection or one without a certificate
//! is closed after its failed handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::telemetry::LogLimit;

/// Longest a handshake may take: a member completes it in a few round trips.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at most; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// A listener whose connections have passed the TLS handshake.
pub struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, handshaken) = mpsc::channel(16);
        let accepting = tokio::spawn(accept(listener, TlsAcceptor::from(config), sender));
        Ok(Self {
            handshaken,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handshaken: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    // Anyone who reaches the port can fail a handshake: one line a second at most.
    let refusals = Arc::new(LogLimit::per(Duration::from_secs(1)));
    loop {
        let Ok(permit) = handshakes.clone().acquire_owned().await else {
            return;
        };
        let (stream, address) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::warn!(%error, "peer listener cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let (handshaken, refusals) = (handshaken.clone(), refusals.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let reason = match handshake.await {
                Ok(Ok(stream)) => {
                    let _ = handshaken.send((stream, address)).await;
                    return;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
            };
            if refusals.allow() {
                tracing::warn!(%address, %reason, "peer connection refused: its TLS handshake failed (a member presents a certificate from cluster.tls_ca; one such line per second at most)");
            } else {
                tracing::debug!(%address, %reason, "peer connection refused");
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accepting task never ends while this listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
