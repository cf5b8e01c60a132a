//! The metadata step ([`Metadata`]): an object's metadata fresh from the cache, or from
//! one coalesced request to the block source — a conditional HEAD for stale metadata, a
//! ranged GET of the first needed blocks for unknown objects (metadata and bytes in one
//! request: the first block returned to the GET step, the rest streamed on), a HEAD when
//! no bytes are needed; what it asks the origin is in `metadata/origin.rs`. Writes
//! invalidate what it knows (`generations.rs` keeps the generations that make that safe).

mod origin;

use std::sync::Arc;

use tracing::Instrument;

use super::coalesce::Coalescer;
use super::discovered::{Discovered, Discovery, FirstRead};
use super::fills::FillSlots;
use super::generations::Generations;
use super::integrity::Integrity;
use super::stream::Streams;
use super::{Internal, MetaSource, ReadError};
use crate::cache::{BlockCache, MetaClock, MetaRecord, MetaState, Tier};
use crate::object::ObjectMeta;
use crate::rules::{Policy, Rules};
use crate::source::{BlockSource, Lease};
use crate::telemetry::Metrics;
use crate::telemetry::{MetadataLookup, TRACE_TARGET};
use crate::types::ObjectRef;

/// The metadata step. Cheap to clone.
#[derive(Clone)]
pub(super) struct Metadata {
    inner: Arc<Inner>,
}

struct Inner {
    /// Metadata records, and the blocks a discovery read on the way.
    cache: BlockCache,
    source: Arc<dyn BlockSource>,
    metrics: Arc<Metrics>,
    rules: Arc<Rules>,
    block_size: u64,
    serve_stale_on_error: bool,
    /// In cluster mode an unknown object is learnt by a HEAD: its blocks come from their
    /// owners.
    clustered: bool,
    clock: MetaClock,
    /// Keyed by object, write generation and whether checksums are asked for.
    /// By object, write generation, checksums, and the stretch of time it began in (see
    /// [`Policy::join_window`]): a read joins a discovery no older than its TTLs.
    discoveries: Coalescer<(ObjectRef, u64, bool, u64), Discovery>,
    generations: Generations,
    integrity: Integrity,
    /// A discovery's GET takes a fill slot, as a block fetch does.
    fills: FillSlots,
    streams: Streams,
}

/// What the metadata step is built from.
pub(super) struct MetadataParts {
    pub(super) cache: BlockCache,
    pub(super) source: Arc<dyn BlockSource>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) rules: Arc<Rules>,
    pub(super) block_size: u64,
    pub(super) serve_stale_on_error: bool,
    pub(super) clustered: bool,
    /// The fleet lease (a node alone always holds its own).
    pub(super) lease: Arc<Lease>,
    pub(super) integrity: Integrity,
    pub(super) fills: FillSlots,
    /// The origin streams, which carry on a discovery's GET of many blocks.
    pub(super) streams: Streams,
}

impl Metadata {
    pub(super) fn new(parts: MetadataParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                cache: parts.cache,
                source: parts.source,
                metrics: parts.metrics,
                rules: parts.rules,
                block_size: parts.block_size,
                serve_stale_on_error: parts.serve_stale_on_error,
                clustered: parts.clustered,
                clock: MetaClock::new(),
                discoveries: Coalescer::default(),
                generations: Generations::new(parts.lease),
                integrity: parts.integrity,
                fills: parts.fills,
                streams: parts.streams,
            }),
        }
    }

    /// The rules every object's policy comes from.
    pub(super) fn rules(&self) -> &Arc<Rules> {
        &self.inner.rules
    }

    pub(super) fn block_size(&self) -> u64 {
        self.inner.block_size
    }

    /// What the cache does for `object`: its `[[rules]]` entry's policy, or the defaults.
    pub(super) fn policy(&self, object: &ObjectRef) -> &Arc<Policy> {
        self.inner.rules.policy(object.bucket(), object.key())
    }

    /// The metadata the cache holds for `object`, fresh or not.
    pub(super) async fn cached(&self, object: &ObjectRef) -> Option<Arc<ObjectMeta>> {
        let record = self.inner.cache.meta(object).await.ok().flatten()?;
        record.meta().cloned()
    }

    /// Drops the cached metadata of `object` (a read found it changed): the next lookup
    /// asks the upstream.
    pub(super) fn forget(&self, object: &ObjectRef) {
        self.inner.cache.remove_meta(object);
    }

    /// `object`'s write generation now (see [`Generations`]).
    pub(super) fn generation(&self, object: &ObjectRef) -> u64 {
        self.inner.generations.current(object)
    }

    #[cfg(test)]
    pub(super) fn generations(&self) -> &Generations {
        &self.inner.generations
    }

    #[cfg(test)]
    pub(super) fn cache(&self) -> &BlockCache {
        &self.inner.cache
    }

    /// Forgets what is known about `object`: the next read asks the upstream.
    pub(super) fn invalidate(&self, object: &ObjectRef) {
        let cache = &self.inner.cache;
        self.inner
            .generations
            .bump_then(object, |_| cache.remove_meta(object));
    }

    /// After a write of `object` whose outcome is unknown: its cached metadata stays but
    /// is revalidated before it is served again (see [`super::ReadPath::expire`]).
    pub(super) async fn expire(&self, object: &ObjectRef) {
        let cached = self.inner.cache.meta(object).await.ok().flatten();
        let (cache, clock) = (&self.inner.cache, &self.inner.clock);
        self.inner
            .generations
            .bump_then(object, |generation| match cached {
                Some(record) if record.meta().is_some() => {
                    cache.insert_meta(object, clock.expired(&record, generation));
                }
                _ => cache.remove_meta(object),
            });
    }

    /// Fresh metadata from the cache, or from one coalesced upstream request, traced as
    /// one `metadata.lookup` span.
    ///
    /// With `checksums`, the answer also knows the object's stored checksums, which only a
    /// HEAD reports: metadata learnt from a ranged GET is completed by one.
    pub(super) async fn resolve_meta(
        &self,
        object: &ObjectRef,
        first_read: FirstRead,
        checksums: bool,
        policy: &Arc<Policy>,
    ) -> Result<Arc<ObjectMeta>, ReadError> {
        Ok(self.resolve(object, first_read, checksums, policy).await?.0)
    }

    /// [`Self::resolve_meta`], with the blocks its first upstream read brought.
    /// `policy` is the object's, looked up once by the request.
    pub(super) async fn resolve(
        &self,
        object: &ObjectRef,
        first_read: FirstRead,
        checksums: bool,
        policy: &Arc<Policy>,
    ) -> Discovery {
        let span = tracing::info_span!(target: TRACE_TARGET, "metadata.lookup", s3.bucket = object.bucket(), s3.key = object.key());
        self.lookup_meta(object, first_read, checksums, policy)
            .instrument(span)
            .await
    }

    async fn lookup_meta(
        &self,
        object: &ObjectRef,
        first_read: FirstRead,
        checksums: bool,
        policy: &Arc<Policy>,
    ) -> Discovery {
        let inner = &self.inner;
        // Read before the cache: a write that lands after this makes the result unusable
        // for caching and sends later readers to a fresh discovery.
        let generation = inner.generations.current(object);
        let cached = match inner.cache.meta(object).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(%object, %error, "metadata lookup failed; asking the upstream");
                None
            }
        };
        // A record stored before the object's last invalidation, or while the fleet lease
        // has run out, may be revalidated, never served as it is.
        let vouched = inner.generations.leased_since(object, generation)
            && cached
                .as_ref()
                .is_some_and(|record| inner.clock.vouches(record, generation));
        if vouched
            && let Some(record) = &cached
            && let Some(answer) = self.fresh(record, policy, checksums)
        {
            return answer.map(|meta| (meta, self.fresh_discovery(record, policy)));
        }
        let known = cached.as_ref().and_then(MetaRecord::meta).cloned();
        let known = known.map(|meta| Known { meta, vouched });
        let this = self.clone();
        // A discovery that began more than a TTL before this read may answer with what the
        // upstream held then: this read starts its own instead of joining it.
        let epoch = inner.clock.epoch(policy.join_window());
        let key = (object.clone(), generation, checksums, epoch);
        let object = object.clone();
        let policy = policy.clone();
        let (result, led) = inner
            .discoveries
            .run(key, move || async move {
                // A discovery that finished while this caller read the disk tier has left
                // its answer in memory: use it instead of asking the upstream again.
                let settled = this.inner.cache.meta_in_memory(&object);
                if let Some(record) = &settled
                    && this.inner.generations.leased_since(&object, generation)
                    && this.inner.clock.vouches(record, generation)
                    && let Some(answer) = this.fresh(record, &policy, checksums)
                {
                    return answer.map(|meta| (meta, this.fresh_discovery(record, &policy)));
                }
                this.discover(&object, generation, known, first_read, checksums, &policy)
                    .await
            })
            .await;
        let (meta, mut discovered) =
            result.map_err(|error| ReadError::Internal(Internal::Discovery(error)))??;
        if !led {
            discovered.tier = Tier::Coalesced;
        }
        Ok((meta, discovered))
    }

    /// How a fresh cached record was found: no blocks, and what is left of its TTL.
    fn fresh_discovery(&self, record: &MetaRecord, policy: &Policy) -> Discovered {
        Discovered {
            source: MetaSource::Fresh,
            ttl: self.inner.clock.remaining(record, policy.metadata_ttl),
            ..Discovered::default()
        }
    }

    /// The answer a cached record gives, if it is still fresh (and knows the checksums
    /// when they are asked for).
    fn fresh(
        &self,
        record: &MetaRecord,
        policy: &Policy,
        checksums: bool,
    ) -> Option<Result<Arc<ObjectMeta>, ReadError>> {
        let inner = &self.inner;
        match &record.state {
            MetaState::Found(meta)
                if inner.clock.is_fresh(record, policy.metadata_ttl)
                    && (!checksums || meta.checksums.is_some()) =>
            {
                inner.metrics.count_metadata(MetadataLookup::Fresh);
                Some(Ok(meta.clone()))
            }
            MetaState::Missing(missing)
                if inner.clock.is_fresh_negative(record, policy.negative_ttl) =>
            {
                inner.metrics.count_metadata(MetadataLookup::Negative);
                Some(Err(ReadError::NotFound(*missing, None)))
            }
            _ => None,
        }
    }

    /// Caches what a discovery learned, unless a write invalidated the object meanwhile:
    /// the answer may predate the write. The check and the insert are one step against an
    /// invalidation ([`Generations`]).
    pub(super) fn store_meta(&self, object: &ObjectRef, generation: u64, state: MetaState) {
        let record = self.inner.clock.record(state, generation);
        let cache = &self.inner.cache;
        self.inner
            .generations
            .store_if_current(object, generation, || cache.insert_meta(object, record));
    }
}

/// The version a cached record names, and whether the record still vouches for it (it
/// was stored under the object's current write generation): only then may it be served
/// stale when the upstream fails.
struct Known {
    meta: Arc<ObjectMeta>,
    vouched: bool,
}
