//! Several upstreams, chosen by bucket (`[upstream]`, named `default`, and `[[upstreams]]`
//! entries), and read failover to an upstream's fallback (a replica).
//!
//! Invariants:
//! - Every request for a bucket goes to the one upstream its bucket routes to: the first
//!   `[[upstreams]]` entry whose patterns match, else `default`. Writes, listings and
//!   everything forwarded never fail over.
//! - A cached read (HEAD, block GET) fails over only when the routed upstream failed with
//!   an error worth retrying (no answer, timeout, 5xx, throttling) after its retries.
//! - A read of a known version is pinned to it on the fallback: block GETs keep their
//!   `If-Match`, a revalidation becomes a HEAD with `If-Match`. When the fallback does not
//!   hold that version (412) or fails too, the routed upstream's own error is returned,
//!   so the client gets an error (or, for a revalidation, the cached version with
//!   `serve_stale_on_error`), never bytes of another version.
//! - An object no version of which is known is read from the fallback unpinned: the
//!   version the fallback holds, every block pinned to it.
//! - Reads of objects without an ETag (streamed, never cached) do not fail over: nothing
//!   names their version.

use std::sync::Arc;

use async_trait::async_trait;

use crate::checksum::Reference;
use crate::config::BucketPattern;
use crate::source::{BlockSource, HeadIf};
use crate::telemetry::{ErrorChain, Metrics};
use crate::types::{ByteRange, ObjectRef, RangeRequest};

use super::{
    Forwarder, HeadOutcome, RangeRead, ResponseHead, StreamedRead, Upstream, UpstreamError,
};

/// One upstream: its S3 client for cached reads and its forwarder for everything else.
pub struct Origin {
    pub name: Arc<str>,
    pub upstream: Arc<Upstream>,
    pub forwarder: Arc<Forwarder>,
    /// The fallback upstream's index and its bucket template (`{bucket}` replaced).
    fallback: Option<(usize, String)>,
}

impl Origin {
    pub fn new(name: &str, upstream: Arc<Upstream>, forwarder: Arc<Forwarder>) -> Self {
        Self {
            name: name.into(),
            upstream,
            forwarder,
            fallback: None,
        }
    }
}

/// The upstreams by bucket. The first is `default`.
pub struct Origins {
    origins: Vec<Origin>,
    /// Bucket patterns in order, each with the origin it routes to.
    routes: Vec<(BucketPattern, usize)>,
    metrics: Arc<Metrics>,
}

impl Origins {
    /// `default` alone: every bucket goes to it.
    pub fn single(default: Origin, metrics: Arc<Metrics>) -> Self {
        metrics.start_upstream(&default.name);
        Self {
            origins: vec![default],
            routes: Vec::new(),
            metrics,
        }
    }

    /// Adds an upstream serving `buckets` (after those added before it).
    pub fn add(&mut self, origin: Origin, buckets: &[BucketPattern]) {
        self.metrics.start_upstream(&origin.name);
        let index = self.origins.len();
        self.routes
            .extend(buckets.iter().map(|bucket| (bucket.clone(), index)));
        self.origins.push(origin);
    }

    /// Makes `fallback` (a name added before) the fallback of `name`, reached in the bucket
    /// `bucket_template` names (`{bucket}`: the bucket read; empty: the same bucket). The
    /// configuration's validation has checked both names; an unknown one sets nothing.
    pub fn set_fallback(&mut self, name: &str, fallback: &str, bucket_template: &str) {
        let position = |wanted: &str| {
            self.origins
                .iter()
                .position(|origin| origin.name.as_ref() == wanted)
        };
        let (Some(index), Some(fallback)) = (position(name), position(fallback)) else {
            return;
        };
        let template = if bucket_template.is_empty() {
            "{bucket}".to_owned()
        } else {
            bucket_template.to_owned()
        };
        self.origins[index].fallback = Some((fallback, template));
    }

    /// Every upstream, `default` first.
    pub fn all(&self) -> &[Origin] {
        &self.origins
    }

    /// `[upstream]`: buckets no entry names, and requests that name no bucket.
    pub fn default_origin(&self) -> &Origin {
        &self.origins[0]
    }

    /// The upstream `bucket` is served from.
    pub fn for_bucket(&self, bucket: &str) -> &Origin {
        let index = self
            .routes
            .iter()
            .find(|(pattern, _)| pattern.matches(bucket))
            .map_or(0, |(_, index)| *index);
        &self.origins[index]
    }

    /// The fallback of `primary` (the upstream `object` routes to) and the object there,
    /// when `primary` failed with `error` and has one.
    fn fallback_for(
        &self,
        primary: &Origin,
        object: &ObjectRef,
        error: &UpstreamError,
    ) -> Option<(&Origin, ObjectRef)> {
        if !error.is_retryable() {
            return None;
        }
        let (index, template) = primary.fallback.as_ref()?;
        let bucket = template.replace("{bucket}", object.bucket());
        let mapped = ObjectRef::new(&bucket, object.key())
            .and_then(|mapped| mapped.with_version(object.version()))
            .ok()?;
        self.metrics.count_failover(&primary.name);
        Some((&self.origins[*index], mapped))
    }

    /// Streams `range` of `object` from its bucket's upstream, or, when that fails and
    /// `fails_over`, from its fallback.
    async fn stream_from(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        if_match: Option<&str>,
        head: &ResponseHead,
        fails_over: bool,
    ) -> Result<StreamedRead, UpstreamError> {
        let primary = self.for_bucket(object.bucket());
        let error = match primary
            .upstream
            .stream_range(object, range, if_match, head)
            .await
        {
            Err(error) if fails_over => error,
            answer => return answer,
        };
        let Some((fallback, mapped)) = self.fallback_for(primary, object, &error) else {
            return Err(error);
        };
        match fallback
            .upstream
            .stream_range(&mapped, range, if_match, head)
            .await
        {
            Ok(read) => Ok(read),
            Err(answer) => {
                tracing::warn!(%object, primary = %primary.name, fallback = %fallback.name, error = %ErrorChain(&error), answer = %ErrorChain(&answer), "upstream failed and its fallback could not stream the version; reporting the upstream's error");
                Err(error)
            }
        }
    }
}

#[async_trait]
impl BlockSource for Origins {
    async fn head(
        &self,
        object: &ObjectRef,
        wanted: HeadIf<'_>,
    ) -> Result<HeadOutcome, UpstreamError> {
        let primary = self.for_bucket(object.bucket());
        let (if_none_match, if_match) = wanted.at_the_upstream();
        let error = match primary
            .upstream
            .head_if(object, if_none_match, if_match)
            .await
        {
            Err(error) => error,
            answer => return answer,
        };
        let Some((fallback, mapped)) = self.fallback_for(primary, object, &error) else {
            return Err(error);
        };
        // A known version (confirmed, or asked for): only that version will do.
        let answer = fallback
            .upstream
            .head_if(&mapped, None, wanted.at_a_fallback())
            .await;
        match (answer, wanted) {
            (Ok(HeadOutcome::Found(_)), HeadIf::Changed(_)) => Ok(HeadOutcome::NotModified),
            (Ok(found), _) => Ok(found),
            (other, _) => {
                tracing::warn!(%object, primary = %primary.name, fallback = %fallback.name, error = %ErrorChain(&error), answer = ?other.err(), "upstream failed and its fallback could not answer for the version; reporting the upstream's error");
                Err(error)
            }
        }
    }

    async fn checksums(
        &self,
        object: &ObjectRef,
        etag: &str,
    ) -> Result<Option<Reference>, UpstreamError> {
        let primary = self.for_bucket(object.bucket());
        primary.upstream.checksums(object, etag).await
    }

    async fn get(
        &self,
        object: &ObjectRef,
        range: RangeRequest,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<RangeRead, UpstreamError> {
        let primary = self.for_bucket(object.bucket());
        let error = match primary
            .upstream
            .get_range(object, range, if_match, max_bytes, head)
            .await
        {
            Err(error) => error,
            answer => return answer,
        };
        let Some((fallback, mapped)) = self.fallback_for(primary, object, &error) else {
            return Err(error);
        };
        match fallback
            .upstream
            .get_range(&mapped, range, if_match, max_bytes, head)
            .await
        {
            Ok(read) => Ok(read),
            Err(answer) => {
                tracing::warn!(%object, primary = %primary.name, fallback = %fallback.name, error = %ErrorChain(&error), answer = %ErrorChain(&answer), "upstream failed and its fallback could not serve the version; reporting the upstream's error");
                Err(error)
            }
        }
    }

    /// Fails over only for a version `if_match` names: nothing names the version of an
    /// object without an ETag.
    async fn stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        if_match: Option<&str>,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError> {
        let fails_over = if_match.is_some();
        self.stream_from(object, range, if_match, head, fails_over)
            .await
    }

    /// Fails over as [`Self::get`] does: the answer names the version it streams.
    async fn discover(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError> {
        self.stream_from(object, range, None, head, true).await
    }
}
