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
//! The upstream is probed at most once per [`PROBE_INTERVAL`], however often `/readyz` and
//! `/metrics` are asked, so probes never become upstream load. An unreachable upstream
//! leaves Portico ready: cached objects are still served (and stale ones, with
//! `serve_stale_on_error`), which a readiness probe taking every replica out of service
//! would throw away exactly when it matters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::shutdown::Shutdown;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::cache::BlockCache;
use crate::cluster::{Cluster, PurgeRequest};
use crate::config::DEFAULT_UPSTREAM;
use crate::events::Invalidator;
use crate::telemetry::{BlockLookup, EventRejection, Metrics};
use crate::types::RangeRequest;
use crate::upstream::{CredentialProblem, Origins};
use crate::warm::{JobState, JobStatus, Maintenance, MaintenanceError, Selector};

const PROBE_INTERVAL: Duration = Duration::from_secs(5);
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An upstream's name and whether its probe succeeded (else what is wrong).
type Probed = (Arc<str>, Result<(), String>);

pub struct AdminState {
    metrics: Arc<Metrics>,
    cache: BlockCache,
    upstreams: Arc<Origins>,
    last_probe: tokio::sync::Mutex<Option<(Instant, Vec<Probed>)>>,
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
    pub fn new(
        metrics: Arc<Metrics>,
        cache: BlockCache,
        upstreams: Arc<Origins>,
        token: &str,
        maintenance: Maintenance,
        cluster: Option<Arc<Cluster>>,
        stopping: Shutdown,
    ) -> Self {
        Self {
            metrics,
            cache,
            upstreams,
            last_probe: tokio::sync::Mutex::new(None),
            token: (!token.is_empty()).then(|| token.to_owned()),
            maintenance,
            cluster,
            stopping,
            events: None,
        }
    }

    /// Serves `POST /events/s3` through `invalidator` to requests bearing `token` (none
    /// while it is empty).
    pub fn with_events(self, invalidator: Invalidator, token: &str) -> Self {
        Self {
            events: (!token.is_empty()).then(|| (invalidator, token.to_owned())),
            ..self
        }
    }

    /// Each upstream's reachability (`default` first), probed at most once per interval,
    /// all at once.
    async fn upstreams_reachable(&self) -> Vec<Probed> {
        let mut last = self.last_probe.lock().await;
        if let Some((at, results)) = last.as_ref()
            && at.elapsed() < PROBE_INTERVAL
        {
            return results.clone();
        }
        let probes = self.upstreams.all().iter().map(|origin| async move {
            let section = if origin.name.as_ref() == DEFAULT_UPSTREAM {
                "upstream".to_owned()
            } else {
                format!("the [[upstreams]] entry {:?}", origin.name)
            };
            let result = origin.upstream.probe().await.map_err(|error| {
                let request_id = error
                    .request_id()
                    .map(|id| format!(" (upstream request id {id})"))
                    .unwrap_or_default();
                match error.credential_problem() {
                    Some(CredentialProblem::Missing) => format!(
                        "no credential: set access_key_id and secret_access_key of {section}, or provide AWS credentials: {error}"
                    ),
                    Some(CredentialProblem::Rejected) => format!(
                        "reachable, but it refuses Portico's credential: check access_key_id and secret_access_key of {section}: {error}{request_id}"
                    ),
                    None => format!("unreachable: {error}"),
                }
            });
            self.metrics.set_upstream_up(&origin.name, result.is_ok());
            (origin.name.clone(), result)
        });
        let results = futures::future::join_all(probes).await;
        *last = Some((Instant::now(), results.clone()));
        results
    }

    /// `/readyz`'s lines on the upstreams: `upstream: …` with one, `upstream NAME: …` each
    /// with several.
    async fn upstream_lines(&self) -> String {
        let results = self.upstreams_reachable().await;
        let several = results.len() > 1;
        results
            .iter()
            .map(|(name, result)| {
                let state = match result {
                    Ok(()) => "reachable".to_owned(),
                    Err(problem) => format!("{problem} (cached objects are still served)"),
                };
                if several {
                    format!("upstream {name}: {state}\n")
                } else {
                    format!("upstream: {state}\n")
                }
            })
            .collect()
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
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/events/s3", post(s3_events));
    }
    if serves != Serves::Health {
        router = router
            .route("/admin/purge", post(purge))
            .route("/admin/warm", post(warm))
            .route("/admin/jobs/{id}", get(job))
            .route("/admin/cache", get(cache_report))
            .route("/admin/cluster", get(cluster_report));
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
    let upstreams = state.upstream_lines().await;
    if state.stopping.is_fired() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: shutting down\ncache: open ({cache})\n{upstreams}"),
        );
    }
    (
        StatusCode::OK,
        format!("{ready}\ncache: open ({cache})\n{upstreams}"),
    )
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    // A scrape refreshes portico_upstream_up (rate-limited like /readyz).
    let _ = state.upstreams_reachable().await;
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
}

/// `POST /events/s3`: an S3 event notification message (S3's `Records`, as S3, MinIO and
/// Ceph RGW send them, in an SNS envelope, or an EventBridge event), with `Authorization:
/// Bearer <events.token>`. Purges what it announces: 200 with what each record did; 400
/// for a malformed message (nothing purged); 502 when a purge failed somewhere (the sender
/// should retry).
async fn s3_events(
    State(state): State<Arc<AdminState>>,
    headers: header::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some((invalidator, token)) = &state.events else {
        return (
            StatusCode::FORBIDDEN,
            "event notifications are disabled: set events.token (PORTICO_EVENTS_TOKEN)\n",
        )
            .into_response();
    };
    if !bearer_matches(&headers, token) {
        state
            .metrics
            .count_event_rejection(EventRejection::Unauthorized);
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"portico-events\"")],
            "a valid events token is required: Authorization: Bearer <events.token>\n",
        )
            .into_response();
    }
    let changes = match crate::events::parse(&body) {
        Ok(changes) => changes,
        Err(malformed) => {
            state
                .metrics
                .count_event_rejection(EventRejection::Malformed);
            return AdminError::bad_request(malformed.to_string()).into_response();
        }
    };
    let applied = invalidator.apply(&changes).await;
    let status = if applied.failed.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    (status, Json(applied)).into_response()
}

/// Whether `Authorization: Bearer <token>` carries `token` (compared in constant time).
fn bearer_matches(headers: &header::HeaderMap, token: &str) -> bool {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
}

/// The objects an admin action applies to: a bucket and either a key or a prefix, and for
/// a warm optionally a `Range` header value such as `bytes=0-1048575`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    bucket: String,
    key: Option<String>,
    prefix: Option<String>,
    range: Option<String>,
}

impl ActionBody {
    fn selector(&self) -> Result<Selector, AdminError> {
        Selector::new(&self.bucket, self.key.as_deref(), self.prefix.as_deref())
            .map_err(|error| AdminError::bad_request(error.to_string()))
    }

    /// The body as JSON, or an error (415 when not JSON, 400 or 422 when malformed) that
    /// says what is wrong with it.
    fn parse(body: Result<Json<Self>, JsonRejection>) -> Result<Self, AdminError> {
        body.map(|Json(body)| body).map_err(|rejection| AdminError {
            status: rejection.status(),
            message: rejection.body_text(),
        })
    }
}

/// An admin API error: its status and a JSON body `{"error": message}`.
struct AdminError {
    status: StatusCode,
    message: String,
}

impl AdminError {
    fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl From<MaintenanceError> for AdminError {
    fn from(error: MaintenanceError) -> Self {
        let status = match error {
            MaintenanceError::List(_) => StatusCode::BAD_GATEWAY,
            MaintenanceError::Busy => StatusCode::TOO_MANY_REQUESTS,
            MaintenanceError::Purge(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self {
            status,
            message: error.to_string(),
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// `POST /admin/purge`: forgets the metadata and blocks of a key, or of every object the
/// upstream lists under a prefix. In cluster mode on every member: the answer lists each
/// member's result, and is 502 when one failed (the purge stands where it succeeded).
async fn purge(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> Result<Response, AdminError> {
    let body = ActionBody::parse(body)?;
    if body.range.is_some() {
        return Err(AdminError::bad_request(
            "a purge removes whole objects; \"range\" is only for a warm",
        ));
    }
    let purged = state.maintenance.purge(&body.selector()?).await?;
    let mut answer = json!({
        "objects": purged.objects,
        "blocks": purged.blocks,
    });
    let Some(cluster) = &state.cluster else {
        return Ok(Json(answer).into_response());
    };
    let request = PurgeRequest {
        bucket: body.bucket,
        key: body.key,
        prefix: body.prefix,
    };
    let mut complete = true;
    let mut members = vec![json!({
        "member": cluster.identity().as_ref(),
        "objects": purged.objects,
        "blocks": purged.blocks,
    })];
    for (member, result) in cluster.purge_members(&request).await {
        members.push(match result {
            Ok(mut purged) => {
                purged["member"] = member.as_ref().into();
                purged
            }
            Err(error) => {
                complete = false;
                tracing::warn!(%member, %error, "purge not passed on to a cluster member");
                json!({ "member": member.as_ref(), "error": error })
            }
        });
    }
    answer["members"] = members.into();
    let status = if complete {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    Ok((status, Json(answer)).into_response())
}

/// `GET /admin/cluster`: the members, their health and ownership share; 404 when cluster
/// mode is off.
async fn cluster_report(State(state): State<Arc<AdminState>>) -> Response {
    match &state.cluster {
        Some(cluster) => Json(cluster.report().await).into_response(),
        None => AdminError {
            status: StatusCode::NOT_FOUND,
            message: "cluster mode is off (cluster.enabled = false)".to_owned(),
        }
        .into_response(),
    }
}

/// `POST /admin/warm`: starts a background job that loads a key or a prefix (optionally
/// one range of each object) into the cache; 202 with the job's id and status URL.
async fn warm(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> Result<Response, AdminError> {
    let body = ActionBody::parse(body)?;
    let selector = body.selector()?;
    let range = match body.range.as_deref().map(RangeRequest::parse) {
        None => None,
        Some(Some(range)) => Some(range),
        Some(None) => {
            return Err(AdminError::bad_request(
                "\"range\" must be a Range header value: bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX",
            ));
        }
    };
    let id = state.maintenance.start_warm(selector, range)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "id": id, "status": format!("/admin/jobs/{id}") })),
    )
        .into_response())
}

fn unix_secs(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

fn job_json(status: &JobStatus) -> serde_json::Value {
    // Until a running job has sized its work (listing, metadata), it is at 0 %.
    let percent = match (status.bytes_total, status.state) {
        (0, JobState::Running) => 0.0,
        (0, _) => 100.0,
        (total, _) => 100.0 * status.bytes_done as f64 / total as f64,
    };
    json!({
        "id": status.id,
        "state": status.state.as_str(),
        "objects_done": status.objects_done,
        "objects_total": status.objects_total,
        "bytes_done": status.bytes_done,
        "bytes_total": status.bytes_total,
        "percent": (percent * 10.0).round() / 10.0,
        "errors": status.errors,
        "started_unix_secs": unix_secs(status.started),
        "finished_unix_secs": status.finished.map(unix_secs),
    })
}

/// `GET /admin/jobs/{id}`: a warm job's progress.
async fn job(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let status = id
        .parse::<u64>()
        .ok()
        .and_then(|id| state.maintenance.status(id))
        .ok_or_else(|| AdminError {
            status: StatusCode::NOT_FOUND,
            message: format!("no warm job {id}"),
        })?;
    Ok(Json(job_json(&status)).into_response())
}

/// `GET /admin/cache`: capacity and usage by tier, and the block hit ratios so far.
async fn cache_report(State(state): State<Arc<AdminState>>) -> Response {
    let usage = state.cache.usage();
    let metrics = &state.metrics;
    let [memory_hits, disk_hits, misses, coalesced] = [
        BlockLookup::MemoryHit,
        BlockLookup::DiskHit,
        BlockLookup::Miss,
        BlockLookup::Coalesced,
    ]
    .map(|result| metrics.block_lookups_of(result));
    let lookups = memory_hits + disk_hits + misses + coalesced;
    let ratio = |count: u64| {
        if lookups == 0 {
            0.0
        } else {
            count as f64 / lookups as f64
        }
    };
    Json(json!({
        "memory": {
            "capacity_bytes": usage.memory_capacity_bytes,
            "used_bytes": usage.memory_used_bytes,
        },
        "disk": {
            "enabled": state.cache.has_disk_tier(),
            "degraded": state.cache.degraded(),
            "capacity_bytes": usage.disk_capacity_bytes,
            "written_bytes": usage.disk_written_bytes,
            "read_bytes": usage.disk_read_bytes,
        },
        "block_lookups": {
            "total": lookups,
            "memory_hit": memory_hits,
            "disk_hit": disk_hits,
            "miss": misses,
            "coalesced": coalesced,
        },
        "hit_ratio": {
            "memory": ratio(memory_hits),
            "disk": ratio(disk_hits),
            "overall": ratio(memory_hits + disk_hits),
        },
    }))
    .into_response()
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
