//! The admin listener: `/healthz` (the process answers), `/readyz` (Portico can serve:
//! the cache is open and it is not shutting down; `degraded` while the disk tier is off,
//! and a line on the upstream's health, which does not decide readiness) and `/metrics`
//! (Prometheus/OpenMetrics text), all open; `POST /events/s3`, S3 event notifications that
//! purge what they announce (`Authorization: Bearer <events.token>`, see `crate::events`);
//! and the admin API under `/admin/` — purge
//! (on every member in cluster mode), warm jobs, cache usage and the cluster's members,
//! JSON in and out — which needs `Authorization: Bearer
//! <admin.token>` (refused outright while no token is configured).
//!
//! The upstream is probed at most once per `probes::PROBE_INTERVAL`, however often `/readyz` and
//! `/metrics` are asked, so probes never become upstream load. An unreachable upstream
//! leaves Portico ready: cached objects are still served (and stale ones, with
//! `serve_stale_on_error`), which a readiness probe taking every replica out of service
//! would throw away exactly when it matters.
//!
//! One file per concern: `probes.rs` (health, readiness and the upstream probes),
//! `metrics.rs`, `events.rs` (S3 event notifications) and `api.rs` (the admin API); this
//! one holds the state they share, the routes and the token check.

mod api;
mod events;
mod metrics;
mod probes;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::cache::BlockCache;
use crate::cluster::Cluster;
use crate::events::Invalidator;
use crate::shutdown::Shutdown;
use crate::telemetry::Metrics;
use crate::upstream::Origins;
use crate::warm::Maintenance;
use probes::Probes;

/// What the admin listener's state is built from.
pub struct AdminParts {
    pub metrics: Arc<Metrics>,
    pub cache: BlockCache,
    pub upstreams: Arc<Origins>,
    /// The bearer token `/admin/` requires; empty disables those endpoints.
    pub token: String,
    pub maintenance: Maintenance,
    /// The cluster, in cluster mode: purges go to every member.
    pub cluster: Option<Arc<Cluster>>,
    /// Fired once shutdown has begun.
    pub stopping: Shutdown,
    /// What `POST /events/s3` purges through, and the bearer token it requires (empty
    /// refuses every request).
    pub events: (Invalidator, String),
}

pub struct AdminState {
    metrics: Arc<Metrics>,
    cache: BlockCache,
    probes: Probes,
    /// The bearer token `/admin/` requires; `None` disables those endpoints.
    token: Option<String>,
    maintenance: Maintenance,
    /// The cluster, in cluster mode: purges go to every member.
    cluster: Option<Arc<Cluster>>,
    /// Fired once shutdown has begun.
    stopping: Shutdown,
    /// What `POST /events/s3` purges through, and the bearer token it requires (`None`
    /// refuses every request).
    events: Option<(Invalidator, String)>,
}

impl AdminState {
    pub fn new(parts: AdminParts) -> Self {
        let AdminParts {
            metrics,
            cache,
            upstreams,
            token,
            maintenance,
            cluster,
            stopping,
            events: (invalidator, events_token),
        } = parts;
        Self {
            probes: Probes::new(upstreams, metrics.clone()),
            metrics,
            cache,
            token: (!token.is_empty()).then_some(token),
            maintenance,
            cluster,
            stopping,
            events: (!events_token.is_empty()).then_some((invalidator, events_token)),
        }
    }
}

/// What an admin listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Health, readiness, metrics and the admin API.
    Everything,
    /// Health, readiness and metrics.
    Health,
    /// The admin API alone (`admin.api_listen`).
    Api,
}

pub fn router(state: Arc<AdminState>, serves: Serves) -> Router {
    let mut router = Router::new();
    if serves != Serves::Api {
        router = router
            .route("/healthz", get(probes::healthz))
            .route("/readyz", get(probes::readyz))
            .route("/metrics", get(metrics::metrics))
            .route("/events/s3", post(events::s3_events));
    }
    if serves != Serves::Health {
        router = router
            .route("/admin/purge", post(api::purge))
            .route("/admin/warm", post(api::warm))
            .route("/admin/jobs/{id}", get(api::job))
            .route("/admin/cache", get(api::cache_report))
            .route("/admin/usage", get(api::usage))
            .route("/admin/cluster", get(api::cluster_report));
    }
    router
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
    if !bearer_matches(request.headers(), token) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"portico-admin\"")],
            "a valid admin token is required: Authorization: Bearer <admin.token>\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// Whether `Authorization: Bearer <token>` carries `token` (compared in constant time).
pub(super) fn bearer_matches(headers: &header::HeaderMap, token: &str) -> bool {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
}

/// Serves the admin endpoints until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    serves: Serves,
    shutdown: Shutdown,
) {
    let shutdown = async move { shutdown.fired().await };
    if let Err(error) = axum::serve(listener, router(state, serves))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(%error, "admin listener failed");
    }
}
