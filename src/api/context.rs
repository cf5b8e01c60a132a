//! One request's context: its id, what the handlers learn about it (operation, bucket,
//! key, credential, where a cached read's bytes came from, `Cache-Status`), and the record
//! that turns it into metrics, trace attributes and an access log line when the response
//! body ends or is dropped.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::conditions::Preconditions;
use super::listener::OpenRequest;
use crate::read::{CacheStatus, Tally};
use crate::rules::Policy;
use crate::telemetry::{ACCESS_TARGET, Metrics, RequestKind};
use crate::tenant::{Charge, Tenant};
use crate::types::{ObjectRef, RangeRequest};

/// A GET or HEAD the cache answers, as the front decoded, authorized and routed it: the
/// one value the S3 handlers read, inserted once by the front (its absence there is a
/// bug, never a default).
#[derive(Debug, Clone)]
pub struct CachedRequest {
    /// The request's context, where the handlers say what the cache did.
    pub context: RequestContext,
    /// The object, with the version the request names.
    pub object: ObjectRef,
    /// The conditional headers, taken off the request.
    pub conditions: Preconditions,
    /// The `Range` header as S3 acts on it (see `range.rs`).
    pub range: Option<RangeRequest>,
    /// The object's policy (its `[[rules]]` entry, or the defaults), looked up once.
    pub policy: Arc<Policy>,
    /// The tenant the request is charged to.
    pub tenant: Arc<Tenant>,
}

/// Per-request facts shared between the front and the S3 handlers.
#[derive(Debug, Clone)]
pub struct RequestContext(Arc<ContextInner>);

#[derive(Debug)]
struct ContextInner {
    id: String,
    operation: OnceLock<&'static str>,
    /// Whether a trace or the access log reports this request (else `range` and `target`
    /// are not filled in: nobody would read them).
    reported: bool,
    /// The request's `Range` header, for the access log.
    range: Option<String>,
    target: OnceLock<RequestTarget>,
    /// Where a cached read's blocks came from.
    tally: OnceLock<Arc<Tally>>,
    /// What the cache did for a GET or HEAD (RFC 9211 `Cache-Status`).
    cache_status: OnceLock<String>,
    /// Whether that status is a hit (set with it).
    cache_hit: OnceLock<bool>,
    /// The `[[rules]]` entry that applied to the object, if one did.
    rule: OnceLock<String>,
    /// Who the request is charged to, and its bucket's label in the cost ledger, once
    /// known.
    charge: OnceLock<(Charge, Arc<str>)>,
}

/// Who asked for what, once the request is authenticated and routed.
#[derive(Debug, Default)]
struct RequestTarget {
    bucket: Option<String>,
    key: Option<String>,
    credential: Option<String>,
}

impl RequestContext {
    /// A new request's context; `reported` when a trace or the access log reports it,
    /// `range` its `Range` header (kept only then).
    pub(super) fn new(id: String, reported: bool, range: Option<&str>) -> Self {
        Self(Arc::new(ContextInner {
            id,
            operation: OnceLock::new(),
            reported,
            range: range.filter(|_| reported).map(str::to_owned),
            target: OnceLock::new(),
            tally: OnceLock::new(),
            cache_status: OnceLock::new(),
            cache_hit: OnceLock::new(),
            rule: OnceLock::new(),
            charge: OnceLock::new(),
        }))
    }

    /// Charges the request to `charge`, in the ledger under the bucket label `bucket`
    /// (the first call wins).
    pub(super) fn set_charge(&self, charge: Charge, bucket: Arc<str>) {
        let _ = self.0.charge.set((charge, bucket));
    }

    /// The tenant the request is charged to, once known.
    pub fn tenant(&self) -> Option<&Arc<Tenant>> {
        self.0.charge.get().map(|(charge, _)| &charge.tenant)
    }

    /// Names who asked for what, once the request is authenticated and routed (kept only
    /// when the request is reported; the first call wins).
    pub(super) fn set_target(
        &self,
        bucket: Option<String>,
        key: Option<String>,
        credential: Option<String>,
    ) {
        if self.0.reported {
            let _ = self.0.target.set(RequestTarget {
                bucket,
                key,
                credential,
            });
        }
    }

    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// Names the S3 operation for metrics and logs; the first name set wins.
    pub fn set_operation(&self, operation: &'static str) {
        let _ = self.0.operation.set(operation);
    }

    fn operation(&self) -> &'static str {
        self.0.operation.get().copied().unwrap_or("Other")
    }

    /// Lets the request's trace and access log say where a cached read's bytes came from.
    pub fn set_tally(&self, tally: Arc<Tally>) {
        let _ = self.0.tally.set(tally);
    }

    /// What the cache did, once a GET or HEAD of the cache has said.
    pub(super) fn cache_status(&self) -> Option<&str> {
        self.0.cache_status.get().map(String::as_str)
    }

    /// Names the rule that applied to the object, for the access log and the trace (kept
    /// only when the request is reported).
    pub(super) fn set_rule(&self, rule: Option<&str>) {
        if self.0.reported
            && let Some(rule) = rule
        {
            let _ = self.0.rule.set(rule.to_owned());
        }
    }

    /// What the cache did, for the response header, the access log and the trace.
    pub fn set_cache_status(&self, status: &CacheStatus) {
        if self.0.cache_status.set(status.to_string()).is_ok() {
            let _ = self.0.cache_hit.set(status.is_hit());
        }
    }
}

/// Request ids: unique per process (a counter) and across restarts (seeded by the clock).
pub(super) struct RequestIds {
    next: AtomicU64,
}

impl RequestIds {
    pub(super) fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        Self {
            next: AtomicU64::new(seed),
        }
    }

    pub(super) fn next(&self) -> String {
        format!("{:016X}", self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Records a request's metrics, trace attributes and access log line when its response
/// body ends or is dropped; the request's span ends with it.
pub(super) struct Record {
    pub(super) metrics: Arc<Metrics>,
    pub(super) context: RequestContext,
    pub(super) status: u16,
    pub(super) started: Instant,
    pub(super) started_at: SystemTime,
    pub(super) sent_bytes: u64,
    pub(super) aborted: bool,
    pub(super) span: tracing::Span,
    /// Keeps the request open on its connection until the response body ends.
    pub(super) _open: Option<OpenRequest>,
}

impl Drop for Record {
    fn drop(&mut self) {
        let operation = self.context.operation();
        let elapsed = self.started.elapsed();
        self.metrics
            .record_request(operation, self.status, elapsed.as_secs_f64());
        if self.aborted {
            self.metrics.response_aborts.inc();
        }
        let context = &self.context.0;
        if let Some((charge, bucket)) = context.charge.get() {
            // A cached read reached the origin when it revalidated, discovered or
            // fetched a block (its own fetch or one it waited for).
            let cached_hit = context.cache_hit.get().is_none_or(|hit| {
                *hit && context.tally.get().is_none_or(|tally| tally.misses() == 0)
            });
            let reached = charge.origin_requests() > 0 || !cached_hit;
            self.metrics.ledger.count_served(
                bucket,
                charge.tenant.name(),
                RequestKind::of_operation(operation),
                self.sent_bytes,
                reached,
            );
        }
        let target = context.target.get();
        let bucket = target.and_then(|target| target.bucket.as_deref());
        let key = target.and_then(|target| target.key.as_deref());
        let tally = context.tally.get();
        let source = tally.map_or("none", |tally| tally.source());
        let span = &self.span;
        if !span.is_disabled() {
            span.record("s3.operation", operation);
            span.record("http.status_code", self.status);
            span.record("bytes", self.sent_bytes);
            if let Some(bucket) = bucket {
                span.record("s3.bucket", bucket);
            }
            if let Some(key) = key {
                span.record("s3.key", key);
            }
            if let Some(status) = context.cache_status.get() {
                span.record("cache.status", status.as_str());
            }
            if let Some(rule) = context.rule.get() {
                span.record("cache.rule", rule.as_str());
            }
            if let Some(tally) = tally {
                span.record("cache.blocks", tally.hits() + tally.misses());
                span.record("cache.hits", tally.hits());
                span.record("cache.misses", tally.misses());
                span.record("cache.source", source);
            }
        }
        tracing::info!(
            target: ACCESS_TARGET,
            time = %httpdate::fmt_http_date(self.started_at),
            request_id = context.id.as_str(),
            credential = target.and_then(|target| target.credential.as_deref()).unwrap_or("-"),
            operation,
            bucket = bucket.unwrap_or("-"),
            key = key.unwrap_or("-"),
            range = context.range.as_deref().unwrap_or("-"),
            status = self.status,
            bytes = self.sent_bytes,
            ms = (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0,
            source,
            cache_status = context.cache_status.get().map_or("-", String::as_str),
            rule = context.rule.get().map_or("-", String::as_str),
            aborted = self.aborted,
            "access"
        );
    }
}

/// A response body that reports its request's metrics when it finishes.
pub struct MeteredBody<B> {
    pub(super) inner: B,
    pub(super) record: Record,
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let sent = data.len() as u64;
                    self.record.sent_bytes += sent;
                    if let Some(tenant) = self.record.context.tenant() {
                        tenant.charge_bytes(sent);
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => self.record.aborted = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique_hex() {
        let ids = RequestIds::new();
        let (first, second) = (ids.next(), ids.next());
        assert_ne!(first, second);
        assert_eq!(first.len(), 16);
        assert!(first.bytes().all(|byte| byte.is_ascii_hexdigit()));
    }
}
