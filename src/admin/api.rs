//! The admin API under `/admin/` — purge (on every member in cluster mode), warm jobs,
//! cache usage and the cluster's members — JSON in and out.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::AdminState;
use crate::cluster::PurgeRequest;
use crate::telemetry::BlockLookup;
use crate::types::RangeRequest;
use crate::warm::{JobState, JobStatus, MaintenanceError, Selector};

/// The objects an admin action applies to: a bucket and either a key or a prefix, and for
/// a warm optionally a `Range` header value such as `bytes=0-1048575`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionBody {
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
pub(super) struct AdminError {
    status: StatusCode,
    message: String,
}

impl AdminError {
    pub(super) fn bad_request(message: impl Into<String>) -> Self {
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
            message: crate::telemetry::error_chain(&error),
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
pub(super) async fn purge(
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
pub(super) async fn cluster_report(State(state): State<Arc<AdminState>>) -> Response {
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
pub(super) async fn warm(
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
pub(super) async fn job(
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
/// `GET /admin/usage`: the cost ledger (docs/operations.md, "The cost ledger").
pub(super) async fn usage(State(state): State<Arc<AdminState>>) -> Response {
    Json(state.metrics.ledger.usage()).into_response()
}

pub(super) async fn cache_report(State(state): State<Arc<AdminState>>) -> Response {
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
            "kept_buffer_bytes": usage.memory_kept_buffer_bytes,
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
