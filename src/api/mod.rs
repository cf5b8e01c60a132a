//! The S3 HTTP surface: s3s for the wire protocol (routing, XML, errors), Portico's
//! handlers behind it, and the listener that serves it with graceful shutdown.

mod checked;
pub(crate) mod chunked;
mod conditions;
mod context;
mod drain;
mod error;
mod front;
mod host;
mod limits;
mod listener;
mod passthrough;
mod range;
pub(crate) mod route;
pub(crate) mod s3;
mod tls;
mod unsigned;

use std::sync::Arc;

use s3s::service::S3ServiceBuilder;

pub use context::RequestContext;
pub use error::UPSTREAM_REQUEST_ID_HEADER;
pub use front::{Front, FrontParts};
pub use host::VirtualHosts;
pub use limits::MAX_KEY_BYTES;
pub use listener::{ConnectionLimits, serve};
pub use tls::ServerTls;

use crate::auth::{Authenticator, Credential, CredentialStore, CredentialsError};
use crate::cluster::Cluster;
use crate::config::{AuthMode, Config};
use crate::listing::ListingCache;
use crate::read::ReadPath;
use crate::shutdown::{Shutdown, Tasks};
use crate::telemetry::Metrics;
use crate::upstream::Origins;
use limits::RequestLimits;
use passthrough::{Passthrough, PassthroughParts, WriteThrough};

/// The verifier of client signatures `config` asks for (`None` with `auth.mode =
/// "none"`), its credentials file watched until `shutdown`; fails when the file cannot be
/// loaded.
pub fn authenticator(
    config: &Config,
    shutdown: Shutdown,
) -> Result<Option<Arc<Authenticator>>, CredentialsError> {
    match config.auth.mode {
        AuthMode::None => {
            tracing::warn!(
                "auth.mode = \"none\": S3 requests are not authenticated; anyone who reaches the S3 listener can use Portico's upstream credentials"
            );
            Ok(None)
        }
        AuthMode::Sigv4 => {
            let auth = &config.auth;
            let configured = (!auth.access_key_id.is_empty())
                .then(|| Credential::new(&auth.access_key_id, &auth.secret_access_key));
            let file = (!auth.credentials_file.as_os_str().is_empty())
                .then(|| auth.credentials_file.clone());
            let credentials = CredentialStore::open(configured, file)?;
            credentials.watch(shutdown);
            Ok(Some(Arc::new(Authenticator::new(
                credentials,
                config.client_region(),
            ))))
        }
    }
}

/// What the S3 service stands on.
pub struct ServiceParts {
    pub read: ReadPath,
    pub upstreams: Arc<Origins>,
    pub listings: Option<Arc<ListingCache>>,
    pub cluster: Option<Arc<Cluster>>,
    /// Writes run as tasks that end whether their client waits or not.
    pub tasks: Tasks,
    pub metrics: Arc<Metrics>,
    /// Verifies signatures, when given.
    pub auth: Option<Arc<Authenticator>>,
}

/// Builds the S3 service for `config`.
pub fn service(config: &Config, parts: ServiceParts) -> Front {
    let ServiceParts {
        read,
        upstreams,
        listings,
        cluster,
        tasks,
        metrics,
        auth,
    } = parts;
    let mut builder = S3ServiceBuilder::new(s3::PorticoS3::new(read.clone()));
    let hosts =
        (!config.server.domains.is_empty()).then(|| VirtualHosts::new(&config.server.domains));
    if let Some(hosts) = &hosts {
        builder.set_host(hosts.clone());
    }
    let write_through = config.cache.write_through.then(|| WriteThrough {
        // Held in memory until the upload completes: at most a quarter of the memory tier.
        max_object_bytes: config.cache.memory_capacity.bytes() / 4,
    });
    let fills = read.fill_slots().clone();
    let passthrough = Arc::new(Passthrough::new(PassthroughParts {
        upstreams,
        read,
        write_through,
        listings,
        cluster,
        tasks,
        metrics: metrics.clone(),
    }));
    Front::new(FrontParts {
        s3: builder.build(),
        passthrough,
        hosts,
        metrics,
        auth,
        limits: RequestLimits::of(&config.server),
        // Validated with the configuration; an empty name sends no header.
        cache_status_header: http::HeaderName::from_bytes(
            config.server.cache_status_header.as_bytes(),
        )
        .ok(),
        fills,
    })
}
