//! Wiring: builds the cache, upstream client and read path from the config, serves them
//! on the listeners it is given, and runs until one shutdown signal stops them all in
//! order — listeners stop accepting, open requests get the grace period, background
//! tasks end, then the cache closes cleanly. The serving tasks are in `app/serving.rs`.

mod serving;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::api;
use crate::budget::MemoryBudget;
use crate::cache::{BlockCache, CacheError};
use crate::cluster::Cluster;
use crate::config::{Config, DEFAULT_UPSTREAM, UpstreamConfig};
use crate::events::Invalidator;
use crate::fill_threads::FillThreads;
use crate::listing::ListingCache;
use crate::read::{PrefetchLimits, ReadParts, ReadPath, ReadSettings, Verify};
use crate::rules::Rules;
use crate::shutdown::{self, Shutdown, Tasks};
use crate::source::{Lease, Peers};
use crate::telemetry::Metrics;
use crate::tls::MutualTls;
use crate::upstream::{self, Origin, Origins, Upstream};
use crate::warm::Maintenance;
use serving::Serving;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(
        "config key {key}: cannot listen on {address} (set {key} to a free address, like \"127.0.0.1:0\" for any port)"
    )]
    Listen {
        key: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Endpoint(#[from] upstream::EndpointError),
    #[error(transparent)]
    Credentials(#[from] crate::auth::CredentialsError),
    #[error("upstream TLS: {0}")]
    UpstreamTls(#[from] upstream::TlsError),
    #[error("S3 listener TLS: {0}")]
    ServerTls(upstream::TlsError),
    #[error("cluster TLS: {0}")]
    PeerTls(upstream::TlsError),
    #[error("cannot start the fill threads: {0}")]
    FillThreads(std::io::Error),
    #[error("cannot install the signal handler: {0}")]
    Signal(std::io::Error),
}

/// The addresses Portico actually listens on (ports resolved when configured as 0).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub s3: SocketAddr,
    /// Whether the S3 listener speaks TLS.
    pub s3_tls: bool,
    pub admin: SocketAddr,
    /// The admin API's own listener, when `admin.api_listen` is set.
    pub admin_api: Option<SocketAddr>,
    /// The peer listener, in cluster mode.
    pub cluster: Option<SocketAddr>,
    /// Whether the peer listener speaks mutual TLS.
    pub cluster_tls: bool,
}

/// Binds the listener configured under `key`.
async fn bind(key: &'static str, address: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| AppError::Listen {
            key,
            address,
            source,
        })
}

/// The sockets Portico serves on. [`run`] takes them bound, so a caller (a test, a
/// supervisor handing over sockets) decides where they come from.
#[derive(Debug)]
pub struct Listeners {
    pub s3: TcpListener,
    pub admin: TcpListener,
    /// The admin API's own listener (`admin.api_listen`).
    pub admin_api: Option<TcpListener>,
    /// The peer listener (`cluster.listen`), in cluster mode.
    pub cluster: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses `config` names.
    pub async fn bind(config: &Config) -> Result<Self, AppError> {
        Ok(Self {
            s3: bind("server.listen", config.server.listen).await?,
            admin: bind("admin.listen", config.admin.listen).await?,
            admin_api: match config.admin.api_listen.0 {
                Some(address) => Some(bind("admin.api_listen", address).await?),
                None => None,
            },
            cluster: if config.cluster.enabled {
                Some(bind("cluster.listen", config.cluster.listen).await?)
            } else {
                None
            },
        })
    }

    fn bound(&self, config: &Config, s3_tls: bool) -> Bound {
        Bound {
            s3: self.s3.local_addr().unwrap_or(config.server.listen),
            s3_tls,
            admin: self.admin.local_addr().unwrap_or(config.admin.listen),
            admin_api: self
                .admin_api
                .as_ref()
                .and_then(|api| api.local_addr().ok()),
            cluster: self
                .cluster
                .as_ref()
                .and_then(|peer| peer.local_addr().ok()),
            cluster_tls: config.cluster.tls(),
        }
    }
}

/// Binds the configured addresses and runs Portico until SIGTERM or Ctrl-C.
pub async fn run_until_signal(
    config: Config,
    on_ready: impl FnOnce(Bound),
) -> Result<(), AppError> {
    // Installed before the listeners are announced, so an orchestrator that stops
    // Portico right after it announced itself gets a clean shutdown, not the default kill.
    let terminate = on_sigterm()?;
    let listeners = Listeners::bind(&config).await?;
    run(config, listeners, wait_for_signal(terminate), on_ready).await
}

/// Runs Portico on `listeners` until `shutdown` resolves, then stops in order: the
/// listeners stop accepting, open requests get the grace period, background tasks (file
/// watchers, warm jobs, prefetches, the disk probe) end, and the cache closes cleanly.
/// `on_ready` receives the bound addresses once every listener accepts connections.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(Bound),
) -> Result<(), AppError> {
    let open_files = crate::cache::raise_open_file_limit();
    tracing::debug!(?open_files, "open-file limit (ulimit -n)");
    let (trigger, stopping) = shutdown::channel();
    let tasks = Tasks::new();
    let parts = assemble(&config, &stopping, &tasks).await?;
    let cache = parts.cache.clone();
    let server_tls = server_tls(&config, &stopping)?;
    let bound = listeners.bound(&config, server_tls.is_some());
    let serving = Serving::start(&config, listeners, parts, server_tls, stopping)?;
    tracing::info!(s3 = %bound.s3, admin = %bound.admin, peers = ?bound.cluster, "portico is serving");
    on_ready(bound);

    shutdown.await;
    tracing::info!(
        grace = ?config.server.shutdown_grace.get(),
        "shutting down: no new connections, finishing open requests"
    );
    trigger.fire();
    serving.finish().await;
    // Writes whose clients hung up, and fleet rounds, end rather than stop.
    let unfinished = tasks.finish(config.server.shutdown_grace.get()).await;
    if unfinished > 0 {
        tracing::warn!(
            unfinished,
            "writes or fleet rounds still ran when the grace period ended"
        );
    }
    cache.close().await?;
    tracing::info!("cache closed; goodbye");
    Ok(())
}

/// What Portico is made of before it serves: the cache, the upstreams, the cluster, the
/// read path and what stands on it.
struct Parts {
    metrics: Arc<Metrics>,
    cache: BlockCache,
    origins: Arc<Origins>,
    /// The AWS SDK configuration of the default upstream (the SQS consumer's too).
    shared: aws_config::SdkConfig,
    cluster: Option<Arc<Cluster>>,
    /// Mutual TLS on the peer port, in cluster mode with `cluster.tls_*`.
    peer_tls: Option<MutualTls>,
    read: ReadPath,
    listings: Option<Arc<ListingCache>>,
    maintenance: Maintenance,
    invalidator: Invalidator,
    /// Writes and fleet rounds, which end rather than stop at shutdown.
    tasks: Tasks,
}

/// Opens the cache, connects the upstreams, joins the cluster and builds the read path
/// and what stands on it; `stopping` ends their background work.
async fn assemble(config: &Config, stopping: &Shutdown, tasks: &Tasks) -> Result<Parts, AppError> {
    let metrics = Arc::new(Metrics::new());
    metrics
        .ledger
        .configure(config.cost.clone(), &config.ledger_buckets());
    let cache = BlockCache::open(&config.cache, metrics.clone()).await?;
    let fill_threads = fill_threads(config)?;
    let (origins, shared) = connect_origins(config, &cache, &metrics, &fill_threads).await?;
    let origins = Arc::new(origins);
    let budget = MemoryBudget::new(
        config.server.max_inflight_bytes.bytes(),
        config.server.inflight_wait.get(),
        metrics.clone(),
    );
    let peer_tls = peer_tls(config, stopping)?;
    let cluster = match config.cluster.enabled {
        true => Some(
            Cluster::start(
                &config.cluster,
                peer_tls.as_ref(),
                metrics.clone(),
                stopping.clone(),
                tasks.clone(),
            )
            .await,
        ),
        false => None,
    };
    let read = ReadPath::new(
        read_settings(config),
        ReadParts {
            cache: cache.clone(),
            source: origins.clone(),
            metrics: metrics.clone(),
            budget,
            shutdown: stopping.clone(),
            peers: cluster.clone().map(|cluster| cluster as Arc<dyn Peers>),
            fill_threads,
        },
    );
    let lease = cluster
        .as_ref()
        .map_or_else(|| Arc::new(Lease::alone()), |cluster| cluster.lease());
    let listings = ListingCache::new(
        &config.listing,
        read.budget().clone(),
        metrics.clone(),
        lease,
    )
    .map(Arc::new);
    let maintenance = Maintenance::new(
        read.clone(),
        origins.clone(),
        listings.clone(),
        config.admin.warm_concurrency as usize,
        stopping.clone(),
    );
    let invalidator = Invalidator::new(
        read.clone(),
        maintenance.clone(),
        cluster.clone(),
        metrics.clone(),
    );
    Ok(Parts {
        metrics,
        cache,
        origins,
        shared,
        cluster,
        peer_tls,
        read,
        listings,
        maintenance,
        invalidator,
        tasks: tasks.clone(),
    })
}

/// The upstreams by bucket (`[upstream]` as `default`, then `[[upstreams]]`) with their
/// fallbacks, and the AWS SDK configuration of `default` (the SQS consumer's too).
async fn connect_origins(
    config: &Config,
    cache: &BlockCache,
    metrics: &Arc<Metrics>,
    fill_threads: &FillThreads,
) -> Result<(Origins, aws_config::SdkConfig), AppError> {
    let connect = async |name: &str, settings: &UpstreamConfig| {
        let tls = upstream::tls_config(settings)?;
        let shared = upstream::sdk_config(settings, &tls, fill_threads.runtime()).await;
        let client = Arc::new(Upstream::new(
            settings,
            &shared,
            cache.buffers().clone(),
            metrics.clone(),
        ));
        let forwarder = Arc::new(upstream::Forwarder::new(
            settings,
            &shared,
            &tls,
            metrics.clone(),
        )?);
        Ok::<_, AppError>((Origin::new(name, client, forwarder), shared))
    };
    let (default, shared) = connect(DEFAULT_UPSTREAM, &config.upstream).await?;
    let mut origins = Origins::single(default, metrics.clone());
    for entry in &config.upstreams {
        let (origin, _) = connect(&entry.name, &entry.resolve(&config.upstream)).await?;
        origins.add(origin, &entry.buckets);
    }
    let base = &config.upstream;
    let fallbacks = std::iter::once((DEFAULT_UPSTREAM, &base.fallback, &base.fallback_bucket))
        .chain(
            config
                .upstreams
                .iter()
                .map(|entry| (entry.name.as_str(), &entry.fallback, &entry.fallback_bucket)),
        );
    for (name, fallback, bucket) in fallbacks {
        if !fallback.is_empty() {
            origins.set_fallback(name, fallback, bucket);
        }
    }
    Ok((origins, shared))
}

/// Read-path settings from the cache, prefetch and upstream sections.
fn read_settings(config: &Config) -> ReadSettings {
    ReadSettings {
        block_size: config.cache.block_size.bytes(),
        rules: Arc::new(Rules::from_config(config)),
        readahead_blocks: config.cache.readahead_blocks as usize,
        prefetch_window_blocks: if config.prefetch.enabled {
            u64::from(config.prefetch.max_window_blocks)
        } else {
            0
        },
        prefetch_limits: PrefetchLimits {
            fetches: config.prefetch.max_concurrent_fetches as usize,
            blocks: (config.prefetch.max_inflight_bytes.bytes() / config.cache.block_size.bytes())
                .max(1) as usize,
        },
        hedge_quantile: config.upstream.hedge_quantile,
        hedge_min_delay: config.upstream.hedge_min_delay.get(),
        serve_stale_on_error: config.cache.serve_stale_on_error,
        verify: Verify {
            fraction: config.cache.verify_fraction,
            per_second: config.cache.verify_max_per_second,
        },
        max_concurrent_fills: config.upstream.max_concurrent_fills,
        learn_checksums: config.cache.learn_checksums,
    }
}

/// The threads block fills run on: one per core, at `upstream.fill_nice`.
fn fill_threads(config: &Config) -> Result<FillThreads, AppError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    FillThreads::start(threads, i32::from(config.upstream.fill_nice)).map_err(AppError::FillThreads)
}

/// The S3 listener's TLS, when configured, watched for certificate changes.
fn server_tls(config: &Config, shutdown: &Shutdown) -> Result<Option<api::ServerTls>, AppError> {
    let server = &config.server;
    if server.tls_cert.as_os_str().is_empty() {
        return Ok(None);
    }
    let tls =
        api::ServerTls::load(&server.tls_cert, &server.tls_key).map_err(AppError::ServerTls)?;
    tls.watch(shutdown.clone());
    tracing::info!(cert = %server.tls_cert.display(), "S3 listener serves TLS");
    Ok(Some(tls))
}

/// Mutual TLS between members, when configured, watched for changes of its files.
fn peer_tls(config: &Config, shutdown: &Shutdown) -> Result<Option<MutualTls>, AppError> {
    let cluster = &config.cluster;
    if !cluster.enabled || !cluster.tls() {
        return Ok(None);
    }
    let server_name = Some(cluster.tls_server_name.as_str()).filter(|name| !name.is_empty());
    let tls = MutualTls::load(
        &cluster.tls_cert,
        &cluster.tls_key,
        &cluster.tls_ca,
        server_name,
    )
    .map_err(AppError::PeerTls)?;
    tls.watch(shutdown.clone());
    tracing::info!(cert = %cluster.tls_cert.display(), ca = %cluster.tls_ca.display(), "peer listener and client use mutual TLS");
    Ok(Some(tls))
}

/// Installs the SIGTERM handler; the returned stream is awaited by [`wait_for_signal`].
fn on_sigterm() -> Result<tokio::signal::unix::Signal, AppError> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(AppError::Signal)
}

/// Resolves on SIGTERM or Ctrl-C (only SIGTERM when the Ctrl-C handler cannot be
/// installed).
async fn wait_for_signal(mut terminate: tokio::signal::unix::Signal) {
    tokio::select! {
        _ = terminate.recv() => tracing::info!("received SIGTERM"),
        result = tokio::signal::ctrl_c() => match result {
            Ok(()) => tracing::info!("received Ctrl-C"),
            Err(error) => {
                tracing::warn!(%error, "cannot watch for Ctrl-C; waiting for SIGTERM");
                terminate.recv().await;
                tracing::info!("received SIGTERM");
            }
        },
    }
}
