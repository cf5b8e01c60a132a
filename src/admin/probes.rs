//! `/healthz` and `/readyz`, and the upstream probes behind `/readyz` and `/metrics`: at
//! most one round per [`PROBE_INTERVAL`], however often they are asked, so probes never
//! become upstream load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::AdminState;
use crate::config::DEFAULT_UPSTREAM;
use crate::telemetry::{ErrorChain, Metrics};
use crate::upstream::{CredentialProblem, Origins};

pub(super) const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// An upstream's name and whether its probe succeeded (else what is wrong).
type Probed = (Arc<str>, Result<(), String>);

/// The upstreams' probes, and the last round's results.
pub(super) struct Probes {
    upstreams: Arc<Origins>,
    metrics: Arc<Metrics>,
    last_probe: tokio::sync::Mutex<Option<(Instant, Vec<Probed>)>>,
}

impl Probes {
    pub(super) fn new(upstreams: Arc<Origins>, metrics: Arc<Metrics>) -> Self {
        Self {
            upstreams,
            metrics,
            last_probe: tokio::sync::Mutex::new(None),
        }
    }

    /// Each upstream's reachability (`default` first), probed at most once per interval,
    /// all at once.
    pub(super) async fn upstreams_reachable(&self) -> Vec<Probed> {
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
                let cause = ErrorChain(&error);
                match error.credential_problem() {
                    Some(CredentialProblem::Missing) => format!(
                        "no credential: set access_key_id and secret_access_key of {section}, or provide AWS credentials: {cause}"
                    ),
                    Some(CredentialProblem::Rejected) => format!(
                        "reachable, but it refuses Portico's credential: check access_key_id and secret_access_key of {section}: {cause}{request_id}"
                    ),
                    None => format!("unreachable: {cause}"),
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

pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

pub(super) async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    // Degraded is still ready: a cache that lost its disk tier serves from memory.
    let (ready, cache) = match state.cache.degraded() {
        Some(reason) => ("degraded", format!("memory only (disk tier off: {reason})")),
        None if state.cache.has_disk_tier() => ("ready", "memory + disk".to_owned()),
        None => ("ready", "memory only".to_owned()),
    };
    let upstreams = state.probes.upstream_lines().await;
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
