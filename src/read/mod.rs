//! The read path: object metadata → byte range → blocks → a stream of exactly the
//! requested bytes.
//!
//! Invariants:
//! - Every block is fetched for the object version (ETag) the response headers announce,
//!   with `If-Match`; a changed object is retried before the response starts and aborts
//!   the body after it has started. Bytes of two versions are never mixed.
//! - Memory is bounded per request and for the process: every block a response holds is
//!   charged to the memory budget (`crate::budget`) from before its lookup until the
//!   connection has written it. The first block of a GET waits a bounded time for room
//!   (then the GET is refused); each next block waits; blocks beyond the next (at most
//!   `readahead_blocks` ahead) and prefetches take only free room.
//! - Prefetch across requests (`prefetch.rs`) fetches only whole blocks of the version
//!   being read, through the same cache and coalescing as demand reads, within a fixed
//!   number of fetches in flight.
//! - Metadata discovery for one object runs once however many requests miss at once, and
//!   for a GET it fetches the first needed block in the same upstream request.

mod coalesce;
mod hedge;
mod manage;
mod metadata;
mod prefetch;
mod source;
mod uncached;
mod writes;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;
use tracing::field::Empty;

use crate::budget::{Charge, MemoryBudget};
use crate::cache::{BlockCache, BlockKey, LookupError, MetaClock, Part, Tier};
use crate::config::MetadataTtl;
use crate::object::{Missing, ObjectMeta};
use crate::telemetry::{Metrics, TRACE_TARGET};
use crate::types::{
    BlockIndex, BlockLayout, ByteRange, ObjectRef, RangeRequest, Selection, Unsatisfiable,
};
use crate::upstream::{ResponseHead, UpstreamError};
use coalesce::Coalescer;
use hedge::Hedger;
pub use manage::KnownVersion;
use prefetch::Detector;
pub use source::BlockSource;

/// Read-path settings taken from the cache configuration.
#[derive(Debug, Clone, Copy)]
pub struct ReadSettings {
    pub block_size: u64,
    pub metadata_ttl: MetadataTtl,
    pub negative_ttl: std::time::Duration,
    pub readahead_blocks: usize,
    /// Largest prefetch window in blocks; 0 turns prefetch off.
    pub prefetch_window_blocks: u64,
    /// Prefetch fetches in flight at most.
    pub prefetch_slots: usize,
    /// Quantile of recent times to first byte after which a block fetch is hedged; 0: never.
    pub hedge_quantile: f64,
    /// Shortest wait before a hedge.
    pub hedge_min_delay: std::time::Duration,
    /// Serve the last known version when the upstream fails a revalidation.
    pub serve_stale_on_error: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("no such {0}")]
    NotFound(Missing, Option<String>),
    #[error(transparent)]
    InvalidRange(#[from] Unsatisfiable),
    #[error("the object changed upstream while it was being read")]
    Changed,
    #[error(transparent)]
    Upstream(UpstreamError),
    #[error("too many bytes in flight: {0}")]
    Busy(#[from] crate::budget::Exhausted),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Who a read error is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    Client,
    Upstream,
    Internal,
}

impl ReadError {
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            Self::NotFound(..) | Self::InvalidRange(_) => ErrorSource::Client,
            Self::Changed | Self::Upstream(_) => ErrorSource::Upstream,
            Self::Busy(_) | Self::Internal(_) => ErrorSource::Internal,
        }
    }

    fn from_upstream(error: UpstreamError) -> Self {
        match error {
            UpstreamError::NotFound {
                missing,
                request_id,
            } => Self::NotFound(missing, request_id),
            UpstreamError::PreconditionFailed { .. } => Self::Changed,
            other => Self::Upstream(other),
        }
    }
}

/// A GET being answered: the object's metadata, what part of it is sent, the bytes, and
/// where the blocks sent so far came from.
pub struct ObjectRead {
    pub meta: Arc<ObjectMeta>,
    pub selection: Selection,
    pub body: BodyStream,
    pub tally: Arc<Tally>,
    /// What the cache did, for the `Cache-Status` header.
    pub status: CacheStatus,
}

/// The blocks one response was served from, by tier, counted as they are sent.
#[derive(Debug, Default)]
pub struct Tally {
    memory: AtomicU64,
    disk: AtomicU64,
    upstream: AtomicU64,
    coalesced: AtomicU64,
}

impl Tally {
    fn count(&self, tier: Tier) {
        let counter = match tier {
            Tier::Memory => &self.memory,
            Tier::Disk => &self.disk,
            Tier::Upstream => &self.upstream,
            Tier::Coalesced => &self.coalesced,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Blocks found in memory or on disk.
    pub fn hits(&self) -> u64 {
        self.memory.load(Ordering::Relaxed) + self.disk.load(Ordering::Relaxed)
    }

    /// Blocks fetched from the upstream, by this response or one it waited for.
    pub fn misses(&self) -> u64 {
        self.upstream.load(Ordering::Relaxed) + self.coalesced.load(Ordering::Relaxed)
    }

    /// Where the bytes came from: the one tier of every block, `mixed`, or `none`.
    pub fn source(&self) -> &'static str {
        let tiers = [
            (Tier::Memory, &self.memory),
            (Tier::Disk, &self.disk),
            (Tier::Upstream, &self.upstream),
            (Tier::Coalesced, &self.coalesced),
        ];
        let mut used = tiers
            .iter()
            .filter(|(_, count)| count.load(Ordering::Relaxed) > 0);
        match (used.next(), used.next()) {
            (None, _) => "none",
            (Some((tier, _)), None) => tier.as_str(),
            (Some(_), Some(_)) => "mixed",
        }
    }
}

/// The bytes of a GET response. An `Err` item means the response must be aborted.
pub type BodyStream = ReceiverStream<Result<Bytes, ReadError>>;

/// What the first upstream request for an object with unknown metadata asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// A HEAD: the caller needs no bytes.
    Head,
    /// The block at this index (a GET from a known offset).
    Block(BlockIndex),
    /// The last block (a suffix range: the offset depends on the unknown size).
    Tail,
}

impl Probe {
    fn for_range(range: Option<RangeRequest>, block_size: u64) -> Self {
        match range {
            None => Self::Block(0),
            Some(RangeRequest::From { first, .. }) => Self::Block(first / block_size),
            Some(RangeRequest::Suffix { .. }) => Self::Tail,
        }
    }
}

type Discovery = Result<(Arc<ObjectMeta>, Probed), ReadError>;

/// How a request's metadata was found, and the whole blocks the upstream GET that
/// discovered an unknown object's metadata read on the way (they are cached too). The
/// request that led the discovery serves those as fetched from the upstream, and one that
/// waited for it as coalesced: neither found them in the cache, so neither counts a hit.
#[derive(Clone)]
struct Probed {
    blocks: Arc<[(BlockIndex, Bytes)]>,
    tier: Tier,
    source: MetaSource,
    /// The metadata's remaining freshness; `None` when it never expires.
    ttl: Option<std::time::Duration>,
}

impl Default for Probed {
    fn default() -> Self {
        Self {
            blocks: Arc::new([]),
            tier: Tier::Upstream,
            source: MetaSource::Fetched,
            ttl: None,
        }
    }
}

/// Where a request's object metadata came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaSource {
    /// The cache, within its TTL.
    Fresh,
    /// The cache, past its TTL, confirmed unchanged by the upstream.
    Revalidated,
    /// The upstream (unknown, changed, or another request's discovery this one waited for).
    Fetched,
    /// The cache, past its TTL, because the upstream failed (`serve_stale_on_error`).
    Stale,
}

/// What the cache did for one GET or HEAD, rendered as RFC 9211's `Cache-Status`:
/// `Portico; hit; detail=memory`, `Portico; fwd=miss; stored; collapsed`,
/// `Portico; fwd=stale; fwd-status=304`, `Portico; fwd=bypass`, with `ttl` (seconds of
/// metadata freshness left) where it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStatus {
    source: MetaSource,
    /// Where the response's first block came from; `None` when it has no body.
    first_block: Option<Tier>,
    /// This request waited for another's upstream request.
    collapsed: bool,
    /// The object is never cached (no ETag names its version).
    bypass: bool,
    ttl: Option<std::time::Duration>,
}

impl CacheStatus {
    fn new(probed: &Probed, first_block: Option<Tier>) -> Self {
        Self {
            source: probed.source,
            first_block,
            collapsed: probed.tier == Tier::Coalesced || first_block == Some(Tier::Coalesced),
            bypass: false,
            ttl: probed.ttl,
        }
    }

    fn bypass(probed: &Probed) -> Self {
        Self {
            bypass: true,
            ..Self::new(probed, Some(Tier::Upstream))
        }
    }
}

impl std::fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bypass {
            return f.write_str("Portico; fwd=bypass");
        }
        let fetched = self.source == MetaSource::Fetched
            || matches!(self.first_block, Some(Tier::Upstream | Tier::Coalesced));
        f.write_str(match self.source {
            _ if fetched => "Portico; fwd=miss; stored",
            MetaSource::Revalidated => "Portico; fwd=stale; fwd-status=304",
            MetaSource::Stale => "Portico; hit; detail=stale-upstream-failed",
            // `Fetched` is answered by the first arm.
            MetaSource::Fresh | MetaSource::Fetched => "Portico; hit",
        })?;
        if self.collapsed {
            f.write_str("; collapsed")?;
        }
        if let Some(ttl) = self.ttl
            && self.source != MetaSource::Stale
        {
            write!(f, "; ttl={}", ttl.as_secs())?;
        }
        match self.first_block {
            Some(Tier::Memory) if self.source != MetaSource::Stale => {
                f.write_str("; detail=memory")
            }
            Some(Tier::Disk) if self.source != MetaSource::Stale => f.write_str("; detail=disk"),
            _ => Ok(()),
        }
    }
}

impl Probed {
    fn block(&self, index: BlockIndex) -> Option<Bytes> {
        self.blocks
            .iter()
            .find(|(probed, _)| *probed == index)
            .map(|(_, bytes)| bytes.clone())
    }
}

/// One version of one object, as a request reads it. Cheap to clone.
#[derive(Clone)]
struct Target {
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    /// The version token in this object's block keys.
    version: Arc<str>,
    layout: BlockLayout,
}

impl Target {
    fn new(object: &ObjectRef, meta: Arc<ObjectMeta>, block_size: u64) -> Self {
        Self {
            object: object.clone(),
            version: meta.version_token().into(),
            layout: BlockLayout::new(block_size, meta.size),
            meta,
        }
    }

    fn key(&self, index: BlockIndex) -> BlockKey {
        BlockKey::new(
            &self.object,
            self.version.clone(),
            self.layout.block_size(),
            index,
        )
    }
}

struct Inner {
    cache: BlockCache,
    source: Arc<dyn BlockSource>,
    metrics: Arc<Metrics>,
    settings: ReadSettings,
    clock: MetaClock,
    /// Keyed by object, write generation and whether checksums are asked for.
    discoveries: Coalescer<(ObjectRef, u64, bool), Discovery>,
    generations: writes::Generations,
    /// Sequential detection and the prefetch budget; `None` when prefetch is off.
    prefetch: Option<(Detector, Arc<Semaphore>)>,
    hedger: Arc<Hedger>,
    budget: MemoryBudget,
}

/// The read path. Cheap to clone.
#[derive(Clone)]
pub struct ReadPath {
    inner: Arc<Inner>,
}

impl ReadPath {
    pub fn new(
        cache: BlockCache,
        source: Arc<dyn BlockSource>,
        metrics: Arc<Metrics>,
        settings: ReadSettings,
        budget: MemoryBudget,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cache,
                source,
                budget,
                hedger: Arc::new(Hedger::new(
                    settings.hedge_quantile,
                    settings.hedge_min_delay,
                    metrics.clone(),
                )),
                metrics,
                settings,
                clock: MetaClock::new(),
                discoveries: Coalescer::default(),
                generations: writes::Generations::default(),
                prefetch: (settings.prefetch_window_blocks > 0).then(|| {
                    (
                        Detector::new(settings.prefetch_window_blocks),
                        Arc::new(Semaphore::new(settings.prefetch_slots.max(1))),
                    )
                }),
            }),
        }
    }

    /// The memory budget this read path charges its blocks to.
    pub fn budget(&self) -> &MemoryBudget {
        &self.inner.budget
    }

    /// The object's metadata, for a HEAD; with `checksums`, including its stored checksums.
    pub async fn head(
        &self,
        object: &ObjectRef,
        checksums: bool,
    ) -> Result<Arc<ObjectMeta>, ReadError> {
        self.resolve_meta(object, Probe::Head, checksums).await
    }

    /// [`Self::head`], with what the cache did for the `Cache-Status` header.
    pub async fn head_with_status(
        &self,
        object: &ObjectRef,
        checksums: bool,
    ) -> Result<(Arc<ObjectMeta>, CacheStatus), ReadError> {
        let (meta, probed) = self.resolve(object, Probe::Head, checksums).await?;
        let status = if meta.etag.is_empty() {
            CacheStatus::bypass(&probed)
        } else {
            CacheStatus::new(&probed, None)
        };
        Ok((meta, status))
    }

    /// Starts a GET of `range` of `object`; with `checksums`, the metadata includes the
    /// object's stored checksums. The first block is read before this returns, so every
    /// error that can still become a status code does.
    pub async fn get(
        &self,
        object: &ObjectRef,
        range: Option<RangeRequest>,
        checksums: bool,
    ) -> Result<ObjectRead, ReadError> {
        let block_size = self.inner.settings.block_size;
        let probe = Probe::for_range(range, block_size);
        let mut retried = false;
        loop {
            // Taken before the metadata: an unknown object's first block arrives with it.
            let mut charge = self.inner.budget.reserve_within(block_size).await?;
            let (meta, probed) = self.resolve(object, probe, checksums).await?;
            let selection = Selection::resolve(range, meta.size)?;
            let Some(bytes) = selection.bytes(meta.size) else {
                return Ok(ObjectRead {
                    meta,
                    selection,
                    body: empty_body(),
                    tally: Arc::default(),
                    status: CacheStatus::new(&probed, None),
                });
            };
            charge.shrink_to(bytes.len_bytes().min(block_size));
            let started = if meta.etag.is_empty() {
                let status = CacheStatus::bypass(&probed);
                self.stream_uncached(object, &meta, bytes, charge)
                    .await
                    .map(|(body, tally)| (body, tally, status))
            } else {
                self.stream_cached(object, &meta, bytes, charge, probed)
                    .await
            };
            match started {
                Ok((body, tally, status)) => {
                    return Ok(ObjectRead {
                        meta,
                        selection,
                        body,
                        tally,
                        status,
                    });
                }
                Err(ReadError::Changed) if !retried => {
                    tracing::info!(%object, "object changed upstream; re-reading its metadata");
                    self.inner.cache.remove_meta(object);
                    retried = true;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Starts streaming `bytes` of the version `meta` names from its blocks (or from
    /// `probed`), reading the first one (charged to `charge`) before it returns.
    async fn stream_cached(
        &self,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
        bytes: ByteRange,
        charge: Charge,
        probed: Probed,
    ) -> Result<(BodyStream, Arc<Tally>, CacheStatus), ReadError> {
        let target = Target::new(object, meta.clone(), self.inner.settings.block_size);
        let first_index = target.layout.block_of(bytes.first());
        let first_block = self
            .block_or_probed(&target, first_index, bytes, charge, &probed)
            .await?;
        let status = CacheStatus::new(&probed, Some(first_block.tier));
        self.prefetch_after(&target, bytes);
        let tally = Arc::new(Tally::default());
        let body = self.stream(target, bytes, first_block, probed, tally.clone());
        Ok((body, tally, status))
    }

    /// Records the read of `bytes` for sequential detection and starts the prefetches it
    /// calls for. Prefetches go through the cache like demand reads, so a demand read of
    /// the same block joins the prefetch instead of fetching again; when the budget is
    /// spent, a prefetch is skipped rather than queued, so demand never waits behind it.
    fn prefetch_after(&self, target: &Target, bytes: ByteRange) {
        let Some((detector, slots)) = &self.inner.prefetch else {
            return;
        };
        let key = (target.object.clone(), target.version.clone());
        let budget = slots.available_permits() as u64;
        let observation = detector.observe(key, target.layout, bytes, budget);
        let metrics = &self.inner.metrics;
        metrics.count_prefetch("used", observation.used);
        metrics.count_prefetch("wasted", observation.wasted);
        for index in observation.prefetch {
            let room = self
                .inner
                .budget
                .try_reserve(target.layout.block_len(index));
            let (Ok(slot), Some(charge)) = (slots.clone().try_acquire_owned(), room) else {
                metrics.count_prefetch("skipped", 1);
                continue;
            };
            metrics.count_prefetch("issued", 1);
            let this = self.clone();
            let target = target.clone();
            tokio::spawn(async move {
                if let Err(error) = this.ensure_block(&target, index).await {
                    let object = &target.object;
                    tracing::debug!(%object, index, %error, "prefetch failed");
                }
                // Once cached, the block is the cache's to account for.
                drop((slot, charge));
            });
        }
    }

    /// Streams `bytes` of `target`, starting with its already read first block, counting
    /// each block sent in `tally`. The stream's lookups belong to the request's trace.
    fn stream(
        &self,
        target: Target,
        bytes: ByteRange,
        first_block: Part,
        probed: Probed,
        tally: Arc<Tally>,
    ) -> BodyStream {
        let (sender, receiver) = mpsc::channel(1);
        let this = self.clone();
        let request = tracing::Span::current();
        let task = async move {
            let layout = target.layout;
            let mut blocks = layout.blocks_for(bytes);
            if blocks.next().is_none() || !this.send_part(&sender, &tally, first_block).await {
                return;
            }
            let readahead = this.inner.settings.readahead_blocks.max(1);
            let budget = &this.inner.budget;
            let mut blocks = blocks.peekable();
            let mut fetches = FuturesOrdered::new();
            loop {
                // The next block waits for room; blocks further ahead take only free room.
                while fetches.len() < readahead
                    && let Some(&index) = blocks.peek()
                {
                    let length = layout.block_len(index);
                    let charge = if fetches.is_empty() {
                        tokio::select! {
                            charge = budget.reserve(length) => charge,
                            () = sender.closed() => return,
                        }
                    } else if let Some(charge) = budget.try_reserve(length) {
                        charge
                    } else {
                        break;
                    };
                    blocks.next();
                    let this = this.clone();
                    let target = target.clone();
                    let probed = probed.clone();
                    fetches.push_back(async move {
                        let block = this.block_or_probed(&target, index, bytes, charge, &probed);
                        (index, block.await)
                    });
                }
                let Some((index, result)) = fetches.next().await else {
                    return;
                };
                match result {
                    Ok(part) => {
                        if !this.send_part(&sender, &tally, part).await {
                            return;
                        }
                    }
                    Err(error) => {
                        let object = &target.object;
                        tracing::warn!(%object, index, %error, "aborting a response after its headers were sent");
                        if matches!(error, ReadError::Changed) {
                            this.inner.cache.remove_meta(object);
                        }
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                }
            }
        };
        tokio::spawn(task.instrument(request));
        ReceiverStream::new(receiver)
    }

    /// Sends the requested part of one block; false when the client has gone.
    async fn send_part(
        &self,
        sender: &mpsc::Sender<Result<Bytes, ReadError>>,
        tally: &Tally,
        part: Part,
    ) -> bool {
        tally.count(part.tier);
        let metrics = &self.inner.metrics;
        let total = part.total_bytes() as u64;
        if part.tier == Tier::Disk {
            // A disk hit may include pieces memory held: the disk served the rest.
            let memory = (part.memory_bytes as u64).min(total);
            metrics.count_served(Tier::Disk.as_str(), total - memory);
            metrics.count_served(Tier::Memory.as_str(), memory);
        } else {
            metrics.count_served(part.tier.as_str(), total);
        }
        for slice in part.slices {
            if sender.send(Ok(slice)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The part of block `index` of `target` inside `bytes`: from a block the metadata
    /// discovery read, else [`Self::block`].
    async fn block_or_probed(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        probed: &Probed,
    ) -> Result<Part, ReadError> {
        let within = target.layout.slice_within(index, bytes);
        match probed.block(index) {
            Some(block) => {
                let span = lookup_span(index);
                self.counted(&span, probed.tier);
                let slice = slice_of(&block, within).ok_or_else(|| {
                    ReadError::Internal(format!("the probed block {index} is shorter than asked"))
                })?;
                Ok(Part::whole(charge.attach(slice), probed.tier))
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
    async fn ensure_block(&self, target: &Target, index: BlockIndex) -> Result<(), ReadError> {
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
        self.inner.metrics.count_block(match tier {
            Tier::Memory => "memory_hit",
            Tier::Disk => "disk_hit",
            Tier::Upstream => "miss",
            Tier::Coalesced => "coalesced",
        });
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

fn empty_body() -> BodyStream {
    let (_, receiver) = mpsc::channel(1);
    ReceiverStream::new(receiver)
}
