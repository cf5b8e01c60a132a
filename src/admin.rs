//! The admin listener: `/healthz` (the process answers), `/readyz` (the cache is open and
//! the upstream answers) and `/metrics` (Prometheus/OpenMetrics text).
//!
//! Readiness probes the upstream at most once per [`PROBE_INTERVAL`], however often the
//! orchestrator asks, so probes never become upstream load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cache::BlockCache;
use crate::telemetry::Metrics;
use crate::upstream::Upstream;

const PROBE_INTERVAL: Duration = Duration::from_secs(5);
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub struct AdminState {
    metrics: Arc<Metrics>,
    cache: BlockCache,
    upstream: Arc<Upstream>,
    last_probe: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl AdminState {
    pub fn new(metrics: Arc<Metrics>, cache: BlockCache, upstream: Arc<Upstream>) -> Self {
        Self {
            metrics,
            cache,
            upstream,
            last_probe: tokio::sync::Mutex::new(None),
        }
    }

    /// The upstream's reachability, probed at most once per interval.
    async fn upstream_reachable(&self) -> Result<(), String> {
        let mut last = self.last_probe.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < PROBE_INTERVAL
        {
            return result.clone();
        }
        let result = self
            .upstream
            .probe()
            .await
            .map_err(|error| error.to_string());
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    let tiers = if state.cache.has_disk_tier() {
        "memory + disk"
    } else {
        "memory only"
    };
    match state.upstream_reachable().await {
        Ok(()) => (
            StatusCode::OK,
            format!("ready\ncache: open ({tiers})\nupstream: reachable\n"),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\ncache: open ({tiers})\nupstream: unreachable: {error}\n"),
        ),
    }
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
}

/// Serves the admin endpoints until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let shutdown = async move {
        let _ = shutdown.changed().await;
    };
    if let Err(error) = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(%error, "admin listener failed");
    }
}
