//! What the metadata step asks the origin, once however many lookups miss at once: a
//! discovery of an unknown object (a ranged GET of the read's first blocks, or the first
//! of its origin streams) or a revalidation of a known one (a conditional HEAD).

use std::sync::Arc;

use super::{Known, Metadata};
use crate::cache::{MetaState, Tier};
use crate::object::ObjectMeta;
use crate::read::discovered::{Discovered, Discovery, FirstRead, whole_blocks};
use crate::read::fills::{FillClass, FillFor, FillSlot};
use crate::read::stream::DISCOVERY_BLOCKS;
use crate::read::{MetaSource, ReadError, Target};
use crate::rules::Policy;
use crate::source::{HeadIf, HeadOutcome, ResponseHead, UpstreamError};
use crate::telemetry::{ErrorChain, MetadataLookup};
use crate::types::{ByteRange, ObjectRef, RangeRequest};

impl Metadata {
    /// Asks the upstream about an object whose cached metadata is missing or stale.
    pub(super) async fn discover(
        &self,
        object: &ObjectRef,
        generation: u64,
        known: Option<Known>,
        first_read: FirstRead,
        checksums: bool,
        policy: &Policy,
    ) -> Discovery {
        let without_blocks = |meta| (meta, Discovered::default());
        let outcome = match (known.as_ref().map(|known| &known.meta), first_read) {
            (Some(known), _) if !checksums || known.checksums.is_some() => self
                .revalidate(object, known)
                .await
                .map(|(meta, unchanged)| {
                    let source = if unchanged {
                        MetaSource::Revalidated
                    } else {
                        MetaSource::Fetched
                    };
                    (
                        meta,
                        Discovered {
                            source,
                            ..Discovered::default()
                        },
                    )
                }),
            // Only a HEAD reports checksums: one pinned to the known version (a fallback
            // answers for that version alone), a plain one if it changed.
            (Some(known), _) => self.head_known(object, known).await.map(without_blocks),
            // In cluster mode blocks come only from their owners, through their caches
            // (which coalesce them): a HEAD learns the version to ask for.
            (None, FirstRead::Head) => self.head_fresh(object).await.map(without_blocks),
            (None, _) if self.inner.clustered => self.head_fresh(object).await.map(without_blocks),
            (None, FirstRead::Blocks { .. } | FirstRead::Tail) => {
                // The GET comes first even when a HEAD must follow: its errors carry the
                // S3 code a GET answers with, a HEAD's do not.
                match self.discover_by_get(object, first_read).await {
                    Ok((discovered_meta, discovered)) if checksums => {
                        self.head_fresh(object).await.map(|meta| {
                            // The discovered bytes only serve the version the HEAD reports.
                            if meta.same_object(&discovered_meta) {
                                (meta, discovered)
                            } else {
                                without_blocks(meta)
                            }
                        })
                    }
                    outcome => outcome,
                }
            }
        };
        if let (
            Err(error),
            Some(Known {
                meta: known,
                vouched: true,
            }),
        ) = (&outcome, &known)
            && self.inner.serve_stale_on_error
            && error.is_retryable()
        {
            // The last known version's cached blocks stay servable; its record stays
            // stale, so the next lookup asks the upstream again.
            tracing::warn!(%object, error = %ErrorChain(&error), "upstream failed to revalidate; serving the cached version");
            self.inner.metrics.stale_serves.inc();
            let stale = Discovered {
                source: MetaSource::Stale,
                ..Discovered::default()
            };
            return Ok((known.clone(), stale));
        }
        match outcome {
            Ok((meta, mut discovered)) => {
                // The blocks before the metadata: a request that finds the metadata must
                // find them too, or it fetches them again.
                if !discovered.blocks.is_empty() {
                    let target = Target::new(object, meta.clone(), self.inner.block_size);
                    for (index, block) in discovered.blocks.iter() {
                        let admitted = self.inner.integrity.admit(&target, *index, block, None);
                        admitted.map_err(ReadError::Upstream)?;
                    }
                    for (index, block) in discovered.blocks.iter() {
                        let key = target.key(*index);
                        self.inner.cache.insert_block(key, block.clone());
                    }
                }
                self.store_meta(object, generation, MetaState::Found(meta.clone()));
                discovered.ttl = policy.full_ttl();
                Ok((meta, discovered))
            }
            Err(UpstreamError::NotFound {
                missing,
                request_id,
            }) => {
                self.inner.metrics.count_metadata(MetadataLookup::Missing);
                if !policy.negative_ttl.is_zero() {
                    self.store_meta(object, generation, MetaState::Missing(missing));
                } else {
                    self.inner.cache.remove_meta(object);
                }
                Err(ReadError::NotFound(missing, request_id))
            }
            Err(error) => Err(ReadError::from_upstream(error)),
        }
    }

    /// One HEAD, taken whatever it says. Returns the metadata and whether it names the
    /// known object's bytes. The HEAD is not conditional: an overwrite with the same bytes,
    /// or a copy onto itself that replaces the metadata, keeps the ETag and changes the
    /// headers, and a 304 would hide that.
    pub(super) async fn revalidate(
        &self,
        object: &ObjectRef,
        known: &Arc<ObjectMeta>,
    ) -> Result<(Arc<ObjectMeta>, bool), UpstreamError> {
        let wanted = match known.etag.as_str() {
            "" => HeadIf::Current,
            etag => HeadIf::Known(etag),
        };
        match self.inner.source.head(object, wanted).await? {
            HeadOutcome::NotModified => Err(UpstreamError::invalid_response(
                "304 for an unconditional HEAD",
            )),
            HeadOutcome::Found(meta) if meta.same_bytes(known) => {
                self.inner
                    .metrics
                    .count_metadata(MetadataLookup::Revalidated);
                // With the headers and checksums the HEAD reported.
                Ok((Arc::new(*meta), true))
            }
            HeadOutcome::Found(meta) => {
                self.inner.metrics.count_metadata(MetadataLookup::Changed);
                Ok((Arc::new(*meta), false))
            }
        }
    }

    /// The known version's metadata with its checksums (a HEAD with `If-Match`), or, when
    /// the object changed, the new version's.
    pub(super) async fn head_known(
        &self,
        object: &ObjectRef,
        known: &ObjectMeta,
    ) -> Result<Arc<ObjectMeta>, UpstreamError> {
        let wanted = match known.etag.as_str() {
            "" => HeadIf::Current,
            etag => HeadIf::Only(etag),
        };
        match self.inner.source.head(object, wanted).await {
            Ok(HeadOutcome::Found(meta)) => {
                self.inner
                    .metrics
                    .count_metadata(MetadataLookup::Revalidated);
                Ok(Arc::new(*meta))
            }
            Ok(HeadOutcome::NotModified) => Err(UpstreamError::invalid_response(
                "304 for a HEAD without If-None-Match",
            )),
            Err(UpstreamError::PreconditionFailed { .. }) => self.head_fresh(object).await,
            Err(error) => Err(error),
        }
    }

    pub(super) async fn head_fresh(
        &self,
        object: &ObjectRef,
    ) -> Result<Arc<ObjectMeta>, UpstreamError> {
        match self.inner.source.head(object, HeadIf::Current).await? {
            HeadOutcome::Found(meta) => {
                self.inner.metrics.count_metadata(MetadataLookup::Fetched);
                Ok(Arc::new(*meta))
            }
            HeadOutcome::NotModified => Err(UpstreamError::invalid_response(
                "304 for an unconditional HEAD",
            )),
        }
    }

    /// One ranged GET that returns the metadata and the first block the caller needs.
    pub(super) async fn discover_by_get(
        &self,
        object: &ObjectRef,
        first_read: FirstRead,
    ) -> Result<(Arc<ObjectMeta>, Discovered), UpstreamError> {
        let block_size = self.inner.block_size;
        // A read of many blocks asks for up to DISCOVERY_BLOCKS of them in one stream.
        let (range, streamed) = match first_read {
            FirstRead::Blocks { first, last } => {
                let blocks = last.map_or(DISCOVERY_BLOCKS, |last| {
                    last.saturating_sub(first)
                        .saturating_add(1)
                        .min(DISCOVERY_BLOCKS)
                });
                let first = first.saturating_mul(block_size);
                let length = blocks.saturating_mul(block_size);
                // S3 reads offsets as signed 64-bit numbers: a range past them is ignored,
                // and the whole object sent.
                let last = first.saturating_add(length - 1).min(i64::MAX as u64);
                let range = RangeRequest::From {
                    first,
                    last: Some(last),
                };
                (range, ByteRange::new(first, last).filter(|_| blocks > 1))
            }
            FirstRead::Tail | FirstRead::Head => {
                (RangeRequest::Suffix { length: block_size }, None)
            }
        };
        // For the tenant whose request started the discovery (its task's charge).
        let fill = crate::tenant::current_charge().map_or_else(
            || self.inner.fills.default_fill(),
            |charge| FillFor {
                tenant: charge.tenant,
                class: FillClass::Demand,
            },
        );
        let slot = self.inner.fills.acquire(&fill).await;
        if let Some(range) = streamed {
            return self.discover_by_stream(object, range, fill, slot).await;
        }
        let head = ResponseHead::default();
        let fetched = self
            .inner
            .source
            .get(object, range, None, block_size, &head)
            .await;
        drop(slot);
        let read = match fetched {
            Ok(read) => {
                fill.fetched(read.body.len());
                read
            }
            // The offset is past the end (or the object is empty): learn the size from a HEAD.
            Err(UpstreamError::InvalidRange { .. }) => {
                return Ok((self.head_fresh(object).await?, Discovered::default()));
            }
            Err(error) => return Err(error),
        };
        self.inner.metrics.count_metadata(MetadataLookup::Fetched);
        let target = Target::new(object, Arc::new(read.meta), block_size);
        // Without an ETag nothing names the version these bytes belong to.
        if target.meta.etag.is_empty() {
            return Ok((target.meta, Discovered::default()));
        }
        let blocks = whole_blocks(&target, read.first, &read.body);
        let discovered = Discovered {
            blocks: blocks.into(),
            tier: Tier::Upstream,
            ..Discovered::default()
        };
        Ok((target.meta, discovered))
    }

    /// [`Self::discover_by_get`] for a read of many blocks: one GET of `range`, holding
    /// the fill `slot`, whose first block comes back with the metadata and whose rest is
    /// streamed on (`Streams::discovered`).
    pub(super) async fn discover_by_stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        fill: FillFor,
        slot: FillSlot,
    ) -> Result<(Arc<ObjectMeta>, Discovered), UpstreamError> {
        let head = ResponseHead::default();
        let read = match self.inner.source.discover(object, range, &head).await {
            Ok(read) if read.first == range.first() => read,
            Ok(_) => {
                let error = "the origin answered a discovery with another range";
                return Err(UpstreamError::invalid_response(error));
            }
            // The offset is past the end (or the object is empty): learn the size from a HEAD.
            Err(UpstreamError::InvalidRange { .. }) => {
                drop(slot);
                return Ok((self.head_fresh(object).await?, Discovered::default()));
            }
            Err(error) => return Err(error),
        };
        self.inner.metrics.count_metadata(MetadataLookup::Fetched);
        let meta = Arc::new(read.meta.clone());
        let target = Target::new(object, meta, self.inner.block_size).for_fill(fill);
        // Without an ETag nothing names the version these bytes belong to.
        if target.meta.etag.is_empty() {
            return Ok((target.meta, Discovered::default()));
        }
        let (index, block, stream) = self.inner.streams.discovered(&target, read, slot).await?;
        let discovered = Discovered {
            blocks: vec![(index, block)].into(),
            tier: Tier::Upstream,
            stream: stream.map(Arc::new),
            ..Discovered::default()
        };
        Ok((target.meta, discovered))
    }
}
