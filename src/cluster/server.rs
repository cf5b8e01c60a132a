//! The peer listener (`cluster.listen`): blocks and purges for the other members, each
//! request authenticated with the shared secret. It serves no S3 request: every other path
//! is 404.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::BodyExt;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use super::listener::TlsListener;
use super::peer_id;
use super::protocol::{
    BLOCK_PATH, BlockRequest, CRC_HEADER, CUT_HEADER, CUT_PATH, CutRequest, FILL_HEADER,
    HAND_HEADER, HAND_PATH, HEALTH_PATH, HELD_MOST, HELD_PATH, HeldAnswer, HeldRequest,
    INVALIDATE_PATH, InvalidateRequest, LEASE_PATH, LEASE_TOKEN_HEADER, LeaseRequest,
    MISSING_HEADER, ObjectVersion, PURGE_PATH, PurgeRequest, RESULT_HEADER, TENANT_HEADER,
    ZONE_HEADER, token_header,
};
use crate::auth::Authenticator;
use crate::cache::Tier;
use crate::checksum::{Algorithm, Crc, Running};
use crate::object::{Missing, ObjectMeta};
use crate::read::{FillClass, FillFor, ReadError, ReadPath};
use crate::shutdown::Shutdown;
use crate::source::PeerId;
use crate::telemetry::{Metrics, PeerResult, error_chain};
use crate::types::ObjectRef;
use crate::warm::{Maintenance, Selector};

/// What the peer listener serves from.
pub struct PeerState {
    pub read: ReadPath,
    /// This node's view of the cluster, which grants the other members their leases.
    pub cluster: Arc<super::Cluster>,
    pub maintenance: Maintenance,
    pub metrics: Arc<Metrics>,
    /// `cluster.secret`.
    pub secret: String,
    /// This node's `cache.block_size`: members must agree on it.
    pub block_size: u64,
    /// Mutual TLS on the peer port (`cluster.tls_*`); plain HTTP when absent.
    pub tls: Option<crate::tls::MutualTls>,
    /// The tenants of the credentials file (`auth.mode = "sigv4"`): a fill for another
    /// member is charged to the tenant it names.
    pub tenants: Option<Arc<Authenticator>>,
}

pub fn router(state: Arc<PeerState>) -> Router {
    Router::new()
        .route(BLOCK_PATH, post(block))
        .route(HELD_PATH, post(held))
        .route(HAND_PATH, post(hand))
        .route(PURGE_PATH, post(purge))
        .route(INVALIDATE_PATH, post(invalidate))
        .route(LEASE_PATH, post(lease))
        .route(CUT_PATH, post(cut))
        .route(HEALTH_PATH, get(|| async { "ok" }))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

/// Serves the peer protocol on `listener` until `shutdown` fires: over mutual TLS when
/// `state.tls` is set, else plain HTTP.
pub async fn serve(listener: TcpListener, state: Arc<PeerState>, shutdown: Shutdown) {
    let stopped = async move { shutdown.fired().await };
    let served = match state.tls.as_ref().map(crate::tls::MutualTls::server_config) {
        None => {
            axum::serve(listener, router(state))
                .with_graceful_shutdown(stopped)
                .await
        }
        Some(config) => match TlsListener::new(listener, config) {
            Ok(listener) => {
                axum::serve(listener, router(state))
                    .with_graceful_shutdown(stopped)
                    .await
            }
            Err(error) => Err(error),
        },
    };
    if let Err(error) = served {
        tracing::error!(%error, "peer listener failed");
    }
}

/// Refuses (401) a request without `Authorization: Bearer <cluster.secret>`.
async fn authenticate(
    State(state): State<Arc<PeerState>>,
    request: Request,
    next: Next,
) -> Response {
    let expected = format!("Bearer {}", state.secret);
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if bool::from(given.ct_eq(expected.as_bytes())) {
        next.run(request).await
    } else {
        tracing::warn!(path = %request.uri().path(), "peer request without the cluster secret refused");
        refusal(
            StatusCode::UNAUTHORIZED,
            "the peer listener needs Authorization: Bearer <cluster.secret>",
        )
    }
}

fn refusal(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// `POST /peer/v1/block`: the bytes asked for of a block of the version asked for.
async fn block(
    State(state): State<Arc<PeerState>>,
    headers: HeaderMap,
    body: Result<Json<BlockRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    let (object, meta) = match named_version(&state, &request.version()) {
        Ok(named) => named,
        Err((status, message)) => {
            state.metrics.count_peer_served(PeerResult::Error, 0);
            return refusal(status, message);
        }
    };
    let [first, end] = request.within;
    let part = match state
        .read
        .serve_peer(
            &object,
            meta,
            request.index,
            first..end,
            fill_for(&state, &headers),
        )
        .await
    {
        Ok(part) => part,
        Err(error) => {
            state.metrics.count_peer_served(PeerResult::Error, 0);
            return read_refusal(&error);
        }
    };
    let hit = matches!(part.tier, Tier::Memory | Tier::Disk);
    let length = part.total_bytes();
    state.metrics.count_peer_served(
        if hit {
            PeerResult::Hit
        } else {
            PeerResult::Miss
        },
        length as u64,
    );
    let mut crc = Running::new(Algorithm::Crc64Nvme);
    for slice in &part.slices {
        crc.update(slice);
    }
    let slices = futures::stream::iter(part.slices.into_iter().map(Ok::<_, std::io::Error>));
    let mut response = Response::new(Body::from_stream(slices));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Ok(etag) = HeaderValue::from_str(&request.etag) {
        headers.insert(header::ETAG, etag);
    }
    if let Ok(crc) = HeaderValue::from_str(&format!("{:016x}", crc.crc().value)) {
        headers.insert(CRC_HEADER, crc);
    }
    headers.insert(
        RESULT_HEADER,
        HeaderValue::from_static(if hit { "hit" } else { "miss" }),
    );
    response
}

/// The object and version `named` names, or the refusal of a request naming another
/// block size or an invalid object.
fn named_version(
    state: &PeerState,
    named: &ObjectVersion,
) -> Result<(ObjectRef, Arc<ObjectMeta>), (StatusCode, String)> {
    if named.block_size != state.block_size {
        return Err((
            StatusCode::CONFLICT,
            format!(
                "this member's cache.block_size is {}, the request's {}: every member must use the same",
                state.block_size, named.block_size
            ),
        ));
    }
    let object = ObjectRef::new(&named.bucket, &named.key)
        .and_then(|object| object.with_version(named.version_id.as_deref()))
        .map_err(|error| (StatusCode::BAD_REQUEST, error.to_string()))?;
    let meta = Arc::new(ObjectMeta {
        size: named.size,
        etag: named.etag.clone(),
        ..ObjectMeta::default()
    });
    Ok((object, meta))
}

/// `POST /peer/v1/held`: which of the blocks asked about this member holds whole.
async fn held(
    State(state): State<Arc<PeerState>>,
    body: Result<Json<HeldRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    if request.indexes.len() > HELD_MOST {
        return refusal(
            StatusCode::BAD_REQUEST,
            format!("at most {HELD_MOST} blocks may be asked about at once"),
        );
    }
    let (object, meta) = match named_version(&state, &request.version) {
        Ok(named) => named,
        Err((status, message)) => return refusal(status, message),
    };
    let member = peer_id(&request.member);
    let held = state
        .read
        .blocks_held(&object, meta, &request.indexes, member);
    Json(HeldAnswer { held }).into_response()
}

/// `POST /peer/v1/hand`: a block of this member's that another member's origin stream
/// brought, cached once its length and CRC64NVME are right.
async fn hand(State(state): State<Arc<PeerState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let named = header(HAND_HEADER).and_then(|named| {
        let named = percent_encoding::percent_decode_str(&named)
            .decode_utf8()
            .ok()?;
        serde_json::from_str::<BlockRequest>(&named).ok()
    });
    let Some(named) = named else {
        return refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "a handed block needs {HAND_HEADER}: its block request, as JSON, percent-encoded"
            ),
        );
    };
    let Some(crc) = header(CRC_HEADER).and_then(|crc| u64::from_str_radix(&crc, 16).ok()) else {
        return refusal(
            StatusCode::BAD_REQUEST,
            format!("a handed block needs {CRC_HEADER}: the CRC64NVME of its bytes, in hex"),
        );
    };
    let (object, meta) = match named_version(&state, &named.version()) {
        Ok(version) => version,
        Err((status, message)) => return refusal(status, message),
    };
    let limit = usize::try_from(state.block_size)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let bytes = match http_body_util::Limited::new(body, limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => return refusal(StatusCode::BAD_REQUEST, format!("body: {error}")),
    };
    if Crc::of(Algorithm::Crc64Nvme, &bytes).value != crc {
        state.metrics.integrity.count_mismatch("peer");
        return refusal(
            StatusCode::BAD_REQUEST,
            "the block's bytes fail the CRC64NVME sent with them",
        );
    }
    match state
        .read
        .take_handed(&object, meta, named.index, bytes)
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => refusal(StatusCode::BAD_REQUEST, error.to_string()),
    }
}

/// Who a fill for the asking member is for: the tenant its `x-portico-tenant` names when
/// this node knows it (else the default tenant), of the class `x-portico-fill` names (else
/// demand); `None`, the default tenant's demand, without either.
fn fill_for(state: &PeerState, headers: &HeaderMap) -> Option<FillFor> {
    let named = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let class = named(FILL_HEADER).and_then(FillClass::named);
    let tenant = named(TENANT_HEADER)
        .zip(state.tenants.as_ref())
        .map(|(name, tenants)| tenants.tenant_named(name));
    if class.is_none() && tenant.is_none() {
        return None;
    }
    let default = state.read.fill_slots().default_fill();
    Some(FillFor {
        tenant: tenant.unwrap_or(default.tenant),
        class: class.unwrap_or(default.class),
    })
}

/// The status a failed block read answers a member with: 412 and 404 are the upstream's
/// word on the object, the rest make the member fetch the block itself.
fn read_refusal(error: &ReadError) -> Response {
    match error {
        ReadError::Changed => refusal(StatusCode::PRECONDITION_FAILED, error.to_string()),
        ReadError::NotFound(missing, _) => {
            let mut response = refusal(StatusCode::NOT_FOUND, error.to_string());
            let what = match missing {
                Missing::NoSuchKey => "key",
                Missing::NoSuchBucket => "bucket",
                Missing::NoSuchVersion => "version",
            };
            response
                .headers_mut()
                .insert(MISSING_HEADER, HeaderValue::from_static(what));
            response
        }
        ReadError::Busy(_) => refusal(StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
        ReadError::InvalidRange(_) => refusal(StatusCode::BAD_REQUEST, error.to_string()),
        ReadError::Upstream(_) | ReadError::Internal(_) => {
            refusal(StatusCode::BAD_GATEWAY, error_chain(&error))
        }
    }
}

/// `POST /peer/v1/purge`: purges on this member only (the member that was asked by an
/// operator passes it on to the others).
async fn purge(
    State(state): State<Arc<PeerState>>,
    body: Result<Json<PurgeRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    let selector = match Selector::new(
        &request.bucket,
        request.key.as_deref(),
        request.prefix.as_deref(),
    ) {
        Ok(selector) => selector,
        Err(error) => return refusal(StatusCode::BAD_REQUEST, error.to_string()),
    };
    match state.maintenance.purge(&selector).await {
        Ok(purged) => Json(json!({
            "objects": purged.objects,
            "blocks": purged.blocks,
        }))
        .into_response(),
        Err(error) => refusal(StatusCode::BAD_GATEWAY, error_chain(&error)),
    }
}

/// `POST /peer/v1/invalidate`: forgets what this member knows of the objects a write
/// through another member changed, before that member answers its client.
async fn invalidate(
    State(state): State<Arc<PeerState>>,
    body: Result<Json<InvalidateRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    let mut objects = Vec::with_capacity(request.objects.len());
    for written in request.objects {
        let object = ObjectRef::new(&written.bucket, &written.key)
            .and_then(|object| object.with_version(written.version_id.as_deref()));
        match object {
            Ok(object) => objects.push(object),
            Err(error) => return refusal(StatusCode::BAD_REQUEST, error.to_string()),
        }
    }
    state
        .maintenance
        .forget_written(&objects, request.unknown)
        .await;
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /peer/v1/lease`: a lease for the asking member (204), or 409 when this node does
/// not grant it one (see `Cluster::lease_asked`); either with this node's token.
async fn lease(
    State(state): State<Arc<PeerState>>,
    body: Result<Json<LeaseRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    let cut: Vec<PeerId> = request.cut.iter().map(|member| peer_id(member)).collect();
    let asked = state
        .cluster
        .lease_asked(&request.member, request.grant, &cut);
    let (granted, token, cuts) = (asked.granted, asked.token, asked.cuts);
    let mut answer = match granted {
        true => StatusCode::NO_CONTENT.into_response(),
        false => refusal(
            StatusCode::CONFLICT,
            format!("no lease for {}", request.member),
        ),
    };
    let headers = answer.headers_mut();
    if let Ok(token) = HeaderValue::from_str(&token_header(token)) {
        headers.insert(LEASE_TOKEN_HEADER, token);
    }
    let cuts: Vec<&str> = cuts.iter().map(|member| member.as_ref()).collect();
    if !cuts.is_empty()
        && let Ok(cuts) = HeaderValue::from_str(&cuts.join(","))
    {
        headers.insert(CUT_HEADER, cuts);
    }
    if granted
        && let Ok(zone) = HeaderValue::from_str(state.cluster.zone())
        && !zone.is_empty()
    {
        headers.insert(ZONE_HEADER, zone);
    }
    answer
}

/// `POST /peer/v1/cut`: members a write through the asking member could not tell; this
/// node stops granting them leases too, until each has caught up with it.
async fn cut(
    State(state): State<Arc<PeerState>>,
    body: Result<Json<CutRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return refusal(rejection.status(), rejection.body_text()),
    };
    let members: Vec<PeerId> = request
        .members
        .iter()
        .map(|member| peer_id(member))
        .collect();
    state.cluster.cut_by_another(&members);
    StatusCode::NO_CONTENT.into_response()
}
