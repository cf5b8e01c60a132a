//! Forwarded requests: the client's request is re-framed for the upstream (signature and
//! hop-by-hop headers dropped, `aws-chunked` payloads decoded and, when they carry
//! trailing checksums, re-encoded unsigned), sent through the forwarder of the upstream
//! its bucket routes to (`crate::upstream::Origins`; never failed over), and the
//! upstream's response streamed back as it came. Writes invalidate the keys they change,
//! and the listing pages whose prefix covers them, as their outcome says. Listings within
//! `listing.cached_prefixes` are answered from the listing cache (`crate::listing`).
//!
//! Invariants: no request body is buffered whole, except a DeleteObjects key list
//! (bounded); a body that fails mid-stream (client gone, broken framing, wrong length)
//! aborts the upstream request, so nothing partial is stored upstream or in the cache.
//! After every write attempt, before its answer: an accepted write is invalidated, one
//! that may have happened (no answer, a 5xx) is revalidated before the cached version is
//! served again, and one that cannot have happened (refused, never sent) changes nothing;
//! in cluster mode, through the write's fleet round (docs/cluster.md). A write runs as a
//! task of its own once its body has been sent: a client that hangs up while the origin
//! or the fleet answers leaves it to end as it would have, never half done.

mod capture;
mod delete;
mod framing;
mod post;

use std::sync::Arc;

use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use s3s::S3Error;

use super::checked::{HoldLast, Sha256Body};
use super::chunked::ErrorSlot;
use super::error::{UPSTREAM_REQUEST_ID_HEADER, error_response, forward_error, invalid_object};
use super::route::{Address, Effect};
use crate::auth::{PayloadCheck, Verified};
use crate::cluster::{Cluster, InvalidateRequest, WrittenObject};
use crate::listing::{ListingCache, Page, PageKey, WriteMark};
use crate::read::ReadPath;
use crate::rules::Rules;
use crate::shutdown::Tasks;
use crate::telemetry::{ErrorChain, Metrics};
use crate::types::ObjectRef;
use crate::upstream::{ForwardRequest, Origins, Payload, UpstreamError};
use capture::Capture;
use delete::{MAX_DELETE_LIST_BYTES, collect_bounded, deleted, deleted_objects};
use framing::{Framing, body_error, client_body, forwarded_headers, full_body};
pub use post::{PostForm, form_boundary};

/// Response headers that describe the upstream connection, not the response.
const DROPPED_RESPONSE_HEADERS: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Write-through settings: on, and the largest object whose bytes are held for it.
#[derive(Debug, Clone, Copy)]
pub struct WriteThrough {
    pub max_object_bytes: u64,
}

pub struct Passthrough {
    /// The upstreams by bucket: a request goes to its bucket's, one without a bucket
    /// (ListBuckets) to `default`.
    upstreams: Arc<Origins>,
    read: ReadPath,
    write_through: Option<WriteThrough>,
    /// Listing pages within `listing.cached_prefixes`, when any are configured.
    listings: Option<Arc<ListingCache>>,
    /// The other members, told of every write, in cluster mode.
    cluster: Option<Arc<Cluster>>,
    /// Writes run to their end whoever waits: shutdown waits for them.
    tasks: Tasks,
    metrics: Arc<Metrics>,
}

/// What a forwarded request needs besides the request, shared by every one.
pub struct PassthroughParts {
    pub upstreams: Arc<Origins>,
    pub read: ReadPath,
    pub write_through: Option<WriteThrough>,
    pub listings: Option<Arc<ListingCache>>,
    pub cluster: Option<Arc<Cluster>>,
    pub tasks: Tasks,
    pub metrics: Arc<Metrics>,
}

/// A forwarded request as the front classified it.
pub struct Forwarded {
    pub operation: &'static str,
    pub effect: Effect,
    pub address: Address,
    pub request_id: String,
}

impl Passthrough {
    pub fn new(parts: PassthroughParts) -> Self {
        let PassthroughParts {
            upstreams,
            read,
            write_through,
            listings,
            cluster,
            tasks,
            metrics,
        } = parts;
        Self {
            upstreams,
            read,
            write_through,
            listings,
            cluster,
            tasks,
            metrics,
        }
    }

    /// The rules every object's policy comes from.
    pub fn rules(&self) -> &Rules {
        self.read.rules()
    }

    pub async fn handle(
        self: &Arc<Self>,
        request: Request<Incoming>,
        forwarded: Forwarded,
    ) -> Response<s3s::Body> {
        let request_id = forwarded.request_id.clone();
        let result = match forwarded.effect {
            Effect::None => self.forward(request, forwarded).await,
            // A write ends as it would have if its client hangs up: once the origin may
            // have applied it, every member must hear of it.
            Effect::WriteObject | Effect::ChangeKey | Effect::DeleteListed => {
                let passthrough = self.clone();
                self.as_write(async move { passthrough.forward(request, forwarded).await })
                    .await
            }
        };
        match result {
            Ok(response) => response,
            Err(error) => error_response(error, &request_id),
        }
    }

    /// Runs `write` as a task of its own, which ends as it would have if its client hangs
    /// up: once the origin may have applied it, every member must hear of it. Its origin
    /// requests are charged to the request's tenant.
    async fn as_write(
        &self,
        write: impl Future<Output = Result<Response<s3s::Body>, S3Error>> + Send + 'static,
    ) -> Result<Response<s3s::Body>, S3Error> {
        let write = self.tasks.spawn(crate::tenant::for_the_caller(write));
        let waiting = ClientWaits(Some(&self.metrics));
        let result = write.await;
        waiting.answered();
        result.unwrap_or_else(|error| {
            tracing::error!(%error, "a write's task failed");
            Err(s3s::s3_error!(InternalError, "the write's task failed"))
        })
    }

    async fn forward(
        &self,
        request: Request<Incoming>,
        forwarded: Forwarded,
    ) -> Result<Response<s3s::Body>, S3Error> {
        let Forwarded {
            operation,
            effect,
            address,
            ..
        } = forwarded;
        let mut changed = changed_objects(&address, effect)?;
        let (parts, body) = request.into_parts();
        let page = match (&self.listings, &address.bucket) {
            (Some(listings), Some(bucket))
                if matches!(operation, "ListObjectsV2" | "ListObjects") =>
            {
                listings
                    .key(bucket, &address.query, &parts.headers)
                    .map(|key| (listings.clone(), key, listings.mark(bucket)))
            }
            _ => None,
        };
        if let Some((listings, key, _)) = &page
            && let Some(cached) = listings.get(key)
        {
            return Ok(page_response(cached));
        }
        let errors = ErrorSlot::default();
        // Over HTTP/2 a body needs no Content-Length: only the stream says whether one comes.
        let framing = Framing::of(&parts.headers, &parts.method, body.is_end_stream())?;
        let mut headers = forwarded_headers(&parts.headers);
        let check = parts
            .extensions
            .get::<Verified>()
            .map_or(PayloadCheck::Unsigned, |verified| verified.payload.clone());
        let mut body = client_body(body, errors.clone());
        let mut signer = None;
        match check {
            PayloadCheck::Unsigned => {}
            PayloadCheck::Sha256(expected) => {
                body = HoldLast::new(Sha256Body::new(body, expected, errors.clone())).boxed();
            }
            PayloadCheck::Chunks(chunks) => signer = Some(chunks),
        }
        let (mut payload, decoded_length) =
            framing.payload(body, &mut headers, signer, errors.clone());

        if effect == Effect::DeleteListed
            && let Some(bucket) = &address.bucket
        {
            let list = collect_bounded(payload, MAX_DELETE_LIST_BYTES).await?;
            changed = deleted_objects(&list)?
                .iter()
                .filter_map(|(key, version)| deleted(bucket, key, version.as_deref()).ok())
                .flatten()
                .collect();
            let length = list.len() as u64;
            payload = Payload::Plain(full_body(list), Some(length));
        }
        let capture = match (effect, self.write_through, decoded_length) {
            // Held until the upload is admitted, so only taken from free budget: without
            // room the upload is forwarded all the same, just not cached.
            (Effect::WriteObject, Some(settings), Some(length))
                if length <= settings.max_object_bytes
                    && changed
                        .first()
                        .is_some_and(|object| self.read.policy(object).cache) =>
            {
                let capture = self.read.budget().try_reserve(length).map(Capture::new);
                if let Some(capture) = &capture {
                    payload = capture.tee(payload);
                }
                capture
            }
            _ => None,
        };

        let Address { bucket, key, query } = address;
        let origin = match &bucket {
            Some(bucket) => self.upstreams.for_bucket(bucket),
            None => self.upstreams.default_origin(),
        };
        let result = origin
            .forwarder
            .send(ForwardRequest {
                operation,
                method: parts.method,
                bucket,
                key,
                query,
                headers,
                payload,
                signed: true,
            })
            .await;
        self.settle_written(&changed, WriteOutcome::of(&result, &errors))
            .await;
        let response = match result {
            Ok(response) => response,
            Err(error) => return Err(body_error(&errors).unwrap_or_else(|| forward_error(&error))),
        };
        if response.status().is_success()
            && let (Some(capture), Some(object)) = (capture, changed.first())
        {
            self.admit(object, &response, capture).await;
        }
        if let Some((listings, key, mark)) = page
            && response.status() == http::StatusCode::OK
        {
            return cache_page(&listings, key, mark, response).await;
        }
        Ok(client_response(response))
    }

    /// What readers see of `changed` after a write attempt: an applied write is seen at
    /// once, one that cannot have happened changes nothing, and one whose outcome is
    /// unknown is revalidated before the cached version is served again.
    async fn settle_written(&self, changed: &[ObjectRef], outcome: WriteOutcome) {
        let unknown = match outcome {
            WriteOutcome::NotApplied => return,
            WriteOutcome::Applied => false,
            WriteOutcome::Unknown => true,
        };
        crate::warm::forget_written(&self.read, self.listings.as_deref(), changed, unknown).await;
        let Some(cluster) = &self.cluster else {
            return;
        };
        if changed.is_empty() {
            return;
        }
        let request = InvalidateRequest {
            objects: changed
                .iter()
                .map(|object| WrittenObject {
                    bucket: object.bucket().to_owned(),
                    key: object.key().to_owned(),
                    version_id: object.version().map(str::to_owned),
                })
                .collect(),
            unknown,
        };
        let report = cluster.tell_members(request).await;
        tracing::debug!(
            ?report,
            objects = changed.len(),
            "the fleet heard of a write"
        );
    }

    /// Write-through: caches the bytes just written, if the upstream holds exactly them.
    async fn admit(&self, object: &ObjectRef, response: &Response<Incoming>, capture: Capture) {
        let Some(etag) = response
            .headers()
            .get(http::header::ETAG)
            .and_then(|value| value.to_str().ok())
        else {
            return;
        };
        let Some(data) = capture.take() else {
            return;
        };
        match self.read.admit_written(object, etag, data).await {
            Ok(()) => tracing::debug!(%object, etag, "written object admitted to the cache"),
            Err(error) => {
                tracing::debug!(%object, error = %ErrorChain(&error), "written object not cached")
            }
        }
    }
}

/// While a write's client waits for its answer: dropped before [`ClientWaits::answered`]
/// (the client hung up, and hyper dropped its request), it counts the write as one whose
/// client left; the write runs on.
struct ClientWaits<'a>(Option<&'a Metrics>);

impl ClientWaits<'_> {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for ClientWaits<'_> {
    fn drop(&mut self) {
        if let Some(metrics) = self.0 {
            metrics.writes.count_client_gone();
        }
    }
}

/// What a forwarded write did to the objects it names, as far as Portico can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteOutcome {
    /// The upstream accepted it (2xx).
    Applied,
    /// It cannot have changed anything: refused with a 4xx, never sent (no connection),
    /// or its body never completed (the upstream stores no partial request).
    NotApplied,
    /// Sent, but no answer came, or the upstream failed with a 5xx: it may have happened.
    Unknown,
}

impl WriteOutcome {
    fn of(result: &Result<Response<Incoming>, UpstreamError>, errors: &ErrorSlot) -> Self {
        match result {
            Ok(response) if response.status().is_success() => Self::Applied,
            Ok(response) if response.status().is_client_error() => Self::NotApplied,
            Ok(_) => Self::Unknown,
            Err(error) if error.never_sent() || errors.get().is_some() => Self::NotApplied,
            Err(_) => Self::Unknown,
        }
    }
}

/// The objects a PutObject, CopyObject (destination), CompleteMultipartUpload or
/// DeleteObject changes (the written object first); DeleteObjects' keys come from its body.
fn changed_objects(address: &Address, effect: Effect) -> Result<Vec<ObjectRef>, S3Error> {
    if !matches!(effect, Effect::WriteObject | Effect::ChangeKey) {
        return Ok(Vec::new());
    }
    let (Some(bucket), Some(key)) = (&address.bucket, &address.key) else {
        return Ok(Vec::new());
    };
    deleted(bucket, key, address.query_value("versionId")).map_err(|error| invalid_object(&error))
}

/// The upstream's response for the client: same status, headers and streamed body; the
/// upstream's request id moves to its own header (the client gets Portico's).
fn client_response(response: Response<Incoming>) -> Response<s3s::Body> {
    let (mut parts, body) = response.into_parts();
    client_headers(&mut parts.headers);
    Response::from_parts(parts, s3s::Body::from(body))
}

/// Drops the upstream connection's headers and moves its request id to its own header.
fn client_headers(headers: &mut http::HeaderMap) {
    for name in DROPPED_RESPONSE_HEADERS {
        headers.remove(name);
    }
    if let Some(upstream_id) = headers.remove("x-amz-request-id") {
        headers.insert(UPSTREAM_REQUEST_ID_HEADER, upstream_id);
    }
}

/// Reads a listing page the upstream answered whole, caches it and answers with it.
async fn cache_page(
    listings: &ListingCache,
    key: PageKey,
    mark: WriteMark,
    response: Response<Incoming>,
) -> Result<Response<s3s::Body>, S3Error> {
    let (mut parts, body) = response.into_parts();
    client_headers(&mut parts.headers);
    // A fresh Date for every answer, cached or not.
    parts.headers.remove(http::header::DATE);
    let body = body.collect().await.map_err(|error| {
        forward_error(&UpstreamError::invalid_response(format!(
            "the listing's body broke off: {error}"
        )))
    })?;
    let page = Page {
        status: parts.status,
        headers: parts.headers,
        body: body.to_bytes(),
    };
    listings.insert(key, page.clone(), mark);
    Ok(page_response(page))
}

/// A listing page, cached or just read, as the client's response.
fn page_response(page: Page) -> Response<s3s::Body> {
    let mut response = Response::new(s3s::Body::from(page.body));
    *response.status_mut() = page.status;
    *response.headers_mut() = page.headers;
    response
}
