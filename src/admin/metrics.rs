//! `/metrics`: Prometheus/OpenMetrics text, after refreshing the upstream probes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AdminState;

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(super) async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    // A scrape refreshes portico_upstream_up (rate-limited like /readyz).
    let _ = state.probes.upstreams_reachable().await;
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
}
