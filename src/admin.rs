//! The admin listener: `/healthz` (the process answers), `/readyz` (the cache is open and
//! the upstream answers; `degraded` while the disk tier is off) and `/metrics`
//! (Prometheus/OpenMetrics text), all open; and
//! everything under `/admin/`, which changes state and needs `Authorization: Bearer
//! <admin.token>` (refused outright while no token is configured).
//!
//! Readiness probes the upstream at most once per [`PROBE_INTERVAL`], however often the
//! orchestrator asks, so probes never become upstream load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use subtle::ConstantTimeEq;
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
    /// The bearer token `/admin/` requires; `None` disables those endpoints.
    token: Option<String>,
}

impl AdminState {
    pub fn new(
        metrics: Arc<Metrics>,
        cache: BlockCache,
        upstream: Arc<Upstream>,
        token: &str,
    ) -> Self {
        Self {
            metrics,
            cache,
            upstream,
            last_probe: tokio::sync::Mutex::new(None),
            token: (!token.is_empty()).then(|| token.to_owned()),
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
        .layer(middleware::from_fn_with_state(state.clone(), guard_admin))
        .with_state(state)
}

/// Lets a request under `/admin` through only with the configured bearer token.
async fn guard_admin(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if path != "/admin" && !path.starts_with("/admin/") {
        return next.run(request).await;
    }
    let Some(token) = &state.token else {
        return (
            StatusCode::FORBIDDEN,
            "admin endpoints are disabled: set admin.token (PORTICO_ADMIN_TOKEN)\n",
        )
            .into_response();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"portico-admin\"")],
            "a valid admin token is required: Authorization: Bearer <admin.token>\n",
        )
            .into_response();
    }
    next.run(request).await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    // Degraded is still ready: a cache that lost its disk tier serves from memory.
    let (ready, cache) = match state.cache.degraded() {
        Some(reason) => ("degraded", format!("memory only (disk tier off: {reason})")),
        None if state.cache.has_disk_tier() => ("ready", "memory + disk".to_owned()),
        None => ("ready", "memory only".to_owned()),
    };
    match state.upstream_reachable().await {
        Ok(()) => (
            StatusCode::OK,
            format!("{ready}\ncache: open ({cache})\nupstream: reachable\n"),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\ncache: open ({cache})\nupstream: unreachable: {error}\n"),
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
