//! `POST /events/s3`: S3 event notifications that purge what they announce
//! (`Authorization: Bearer <events.token>`, see `crate::events`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::api::AdminError;
use super::{AdminState, bearer_matches};
use crate::telemetry::EventRejection;

/// `POST /events/s3`: an S3 event notification message (S3's `Records`, as S3, MinIO and
/// Ceph RGW send them, in an SNS envelope, or an EventBridge event), with `Authorization:
/// Bearer <events.token>`. Purges what it announces: 200 with what each record did; 400
/// for a malformed message (nothing purged); 502 when a purge failed somewhere (the sender
/// should retry).
pub(super) async fn s3_events(
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
