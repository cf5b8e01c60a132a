//! The S3 HTTP surface: s3s for the wire protocol (routing, XML, errors), Portico's
//! handlers behind it, and the listener that serves it with graceful shutdown.

mod checked;
mod chunked;
mod conditions;
mod error;
mod front;
mod host;
mod passthrough;
mod route;
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

use crate::auth::{Authenticator, Credential, CredentialStore, CredentialsError};
use crate::config::{AuthMode, Config};
use crate::read::ReadPath;
use crate::telemetry::Metrics;
use crate::upstream::Forwarder;
use passthrough::{Passthrough, WriteThrough};

/// Builds the S3 service for `config`; fails when the credentials file cannot be loaded.
pub fn service(
    config: &Config,
    read: ReadPath,
    forwarder: Arc<Forwarder>,
    metrics: Arc<Metrics>,
) -> Result<Front, CredentialsError> {
    let mut builder = S3ServiceBuilder::new(s3::PorticoS3::new(read.clone()));
    let hosts =
        (!config.server.domains.is_empty()).then(|| VirtualHosts::new(&config.server.domains));
    if let Some(hosts) = &hosts {
        builder.set_host(hosts.clone());
    }
    let auth = match config.auth.mode {
        AuthMode::None => {
            tracing::warn!(
                "auth.mode = \"none\": S3 requests are not authenticated; anyone who reaches the S3 listener can use Portico's upstream credentials"
            );
            None
        }
        AuthMode::Sigv4 => {
            let auth = &config.auth;
            let configured = (!auth.access_key_id.is_empty())
                .then(|| Credential::new(&auth.access_key_id, &auth.secret_access_key));
            let file = (!auth.credentials_file.as_os_str().is_empty())
                .then(|| auth.credentials_file.clone());
            let credentials = CredentialStore::open(configured, file)?;
            credentials.watch();
            Some(Arc::new(Authenticator::new(credentials)))
        }
    };
    let write_through = config.cache.write_through.then(|| WriteThrough {
        // Held in memory until the upload completes: at most a quarter of the memory tier.
        max_object_bytes: config.cache.memory_capacity.bytes() / 4,
    });
    let passthrough = Arc::new(Passthrough::new(forwarder, read, write_through));
    Ok(Front::new(
        builder.build(),
        passthrough,
        hosts,
        metrics,
        auth,
    ))
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
