//! The block step: one block's bytes from the cache, or fetched once (coalesced, hedged)
//! from the block source and cached.

use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;
use tracing::field::Empty;

use super::metadata::Discovered;
use super::{BlockSource, ReadError, ReadPath, Target};
use crate::budget::Charge;
use crate::cache::{LookupError, Part, Tier};
use crate::object::ObjectMeta;
use crate::telemetry::TRACE_TARGET;
use crate::types::{BlockIndex, ByteRange, ObjectRef};
use crate::upstream::{ResponseHead, UpstreamError};

impl ReadPath {
    /// The part of block `index` of `target` inside `bytes`: from a block the metadata
    /// discovery read, else [`Self::block`].
    pub(super) async fn block_or_discovered(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        discovered: &Discovered,
    ) -> Result<Part, ReadError> {
        let within = target.layout.slice_within(index, bytes);
        match discovered.block(index) {
            Some(block) => {
                let span = lookup_span(index);
                self.counted(&span, discovered.tier);
                let slice = slice_of(&block, within).ok_or_else(|| {
                    ReadError::Internal(format!(
                        "the discovered block {index} is shorter than asked"
                    ))
                })?;
                Ok(Part::whole(charge.attach(slice), discovered.tier))
            }
            None => self.block(target, index, within, charge).await,
        }
    }

    /// Bytes `within` block `index` of `target`, from the cache or the upstream, counted
    /// as a lookup and carrying `charge` until their last slice is dropped.
    async fn block(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        charge: Charge,
    ) -> Result<Part, ReadError> {
        let span = lookup_span(index);
        let part = self
            .cache_block(target, index, within)
            .instrument(span.clone())
            .await?;
        self.counted(&span, part.tier);
        Ok(Part {
            slices: charge.attach_all(part.slices),
            ..part
        })
    }

    /// Caches block `index` of `target` unless the cache holds it already (a prefetch or
    /// warm: nothing is read from disk for it).
    pub(super) async fn ensure_block(
        &self,
        target: &Target,
        index: BlockIndex,
    ) -> Result<(), ReadError> {
        let length = usize::try_from(target.layout.block_len(index)).unwrap_or(usize::MAX);
        if self.inner.cache.holds(&target.key(index), length) {
            return Ok(());
        }
        self.cache_block(target, index, 0..length).await.map(drop)
    }

    /// Records where a block came from on its lookup span and in the lookup metric.
    fn counted(&self, span: &tracing::Span, tier: Tier) {
        span.record("cache.tier", tier.as_str());
        span.record("cache.hit", matches!(tier, Tier::Memory | Tier::Disk));
        self.inner.metrics.count_block(tier.lookup());
    }

    /// Bytes `within` block `index` of `target` through the cache (the block is fetched
    /// and cached on a miss), their length checked.
    async fn cache_block(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
    ) -> Result<Part, ReadError> {
        let object = &target.object;
        let range = target
            .layout
            .block_range(index)
            .ok_or_else(|| ReadError::Internal(format!("block {index} is outside the object")))?;
        let key = target.key(index);
        let fetch = {
            let source = self.inner.source.clone();
            let hedger = self.inner.hedger.clone();
            let object = object.clone();
            let meta = target.meta.clone();
            move || {
                // Created where the lookup starts the fetch, so it is the lookup's child
                // even though the fetch runs in a task of its own.
                let span = tracing::info_span!(target: TRACE_TARGET, "upstream.fetch", http.range = %range.header_value());
                async move {
                    hedger
                        .run(|head| {
                            fetch_block(source.clone(), object.clone(), meta.clone(), range, head)
                        })
                        .await
                }
                .instrument(span)
            }
        };
        let block_len = usize::try_from(range.len_bytes()).unwrap_or(usize::MAX);
        let wanted = within.len();
        let result = match self
            .inner
            .cache
            .block(&key, block_len, within.clone(), fetch.clone())
            .await
        {
            Ok(found) => Ok(found),
            Err(LookupError::Fetch(error)) => Err(ReadError::from_upstream(error)),
            Err(LookupError::Cache(error)) => {
                // The cache failed, not the object: serve this block straight from upstream.
                tracing::warn!(%object, index, %error, "cache lookup failed; reading the block from upstream");
                let block = fetch().await.map_err(ReadError::from_upstream)?;
                // A short block gives an empty part, refused below.
                let slice = slice_of(&block, within).unwrap_or_default();
                Ok(Part::whole(slice, Tier::Upstream))
            }
        };
        let part = result?;
        let got = part.total_bytes();
        if got != wanted {
            return Err(ReadError::Internal(format!(
                "block {index} of {object} gave {got} bytes for a part of {wanted}"
            )));
        }
        Ok(part)
    }
}

/// Bytes `within` of `block`; `None` when the block is shorter.
fn slice_of(block: &Bytes, within: std::ops::Range<usize>) -> Option<Bytes> {
    (within.start <= within.end && within.end <= block.len()).then(|| block.slice(within))
}

fn lookup_span(index: BlockIndex) -> tracing::Span {
    tracing::info_span!(target: TRACE_TARGET, "block.lookup", block.index = index, cache.tier = Empty, cache.hit = Empty)
}

/// Fetches one block of the version `meta` describes; a different version is an error.
async fn fetch_block(
    source: Arc<dyn BlockSource>,
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    range: ByteRange,
    head: ResponseHead,
) -> Result<Bytes, UpstreamError> {
    let if_match = (!meta.etag.is_empty()).then_some(meta.etag.as_str());
    let read = source
        .get(&object, range.into(), if_match, range.len_bytes(), &head)
        .await?;
    if read.meta.etag != meta.etag || read.meta.size != meta.size {
        return Err(UpstreamError::PreconditionFailed { request_id: None });
    }
    if read.first != range.first() || read.body.len() as u64 != range.len_bytes() {
        return Err(UpstreamError::invalid_response(format!(
            "asked for {}, got {} bytes from offset {}",
            range.header_value(),
            read.body.len(),
            read.first
        )));
    }
    Ok(read.body)
}
