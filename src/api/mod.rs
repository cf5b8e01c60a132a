//! The S3 HTTP surface: s3s for the wire protocol (routing, XML, errors), Portico's
//! handlers behind it, and the listener that serves it with graceful shutdown.

mod error;
mod front;
mod host;
mod s3;

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::UPSTREAM_REQUEST_ID_HEADER;
pub use front::{Front, RequestContext};
pub use host::VirtualHosts;

use crate::config::{AuthMode, Config};
use crate::read::ReadPath;
use crate::telemetry::Metrics;

/// Builds the S3 service for `config`.
pub fn service(config: &Config, read: ReadPath, metrics: Arc<Metrics>) -> Front {
    let mut builder = S3ServiceBuilder::new(s3::PorticoS3::new(read));
    if !config.server.domains.is_empty() {
        builder.set_host(VirtualHosts::new(&config.server.domains));
    }
    let strip_signatures = match config.auth.mode {
        AuthMode::None => true,
    };
    Front::new(builder.build(), metrics, strip_signatures)
}

/// Serves S3 on `listener` until `shutdown` fires, then lets open requests finish for up
/// to `grace`.
pub async fn serve(
    listener: TcpListener,
    front: Front,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Typically EMFILE: back off instead of spinning on accept.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let connection = builder.serve_connection(TokioIo::new(stream), front.clone()).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("S3 listener drained"),
        () = tokio::time::sleep(grace) => tracing::warn!(?grace, "S3 connections still open after the grace period; closing them"),
    }
}
