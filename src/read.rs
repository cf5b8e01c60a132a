//! The read path: object metadata → byte range → blocks → a stream of exactly the
//! requested bytes.
//!
//! Invariants:
//! - Every block is fetched for the object version (ETag) the response headers announce,
//!   with `If-Match`; a changed object is retried before the response starts and aborts
//!   the body after it has started. Bytes of two versions are never mixed.
//! - Memory per request is bounded: at most `readahead_blocks` blocks are fetched ahead
//!   of what the client has consumed, plus one queued for the connection.
//! - Metadata discovery for one object runs once however many requests miss at once, and
//!   for a GET it fetches the first needed block in the same upstream request.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::cache::{
    BlockCache, BlockKey, LookupError, MetaClock, MetaRecord, MetaState, Missing, ObjectMeta, Tier,
};
use crate::coalesce::Coalescer;
use crate::config::MetadataTtl;
use crate::telemetry::Metrics;
use crate::types::{
    BlockIndex, BlockLayout, ByteRange, ObjectRef, RangeRequest, Selection, Unsatisfiable,
};
use crate::upstream::{HeadOutcome, Upstream, UpstreamError};

/// Read-path settings taken from the cache configuration.
#[derive(Debug, Clone, Copy)]
pub struct ReadSettings {
    pub block_size: u64,
    pub metadata_ttl: MetadataTtl,
    pub negative_ttl: std::time::Duration,
    pub readahead_blocks: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("no such {}", match .0 { Missing::NoSuchKey => "key", Missing::NoSuchBucket => "bucket" })]
    NotFound(Missing, Option<String>),
    #[error(transparent)]
    InvalidRange(#[from] Unsatisfiable),
    #[error("the object changed upstream while it was being read")]
    Changed,
    #[error(transparent)]
    Upstream(UpstreamError),
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
            Self::Internal(_) => ErrorSource::Internal,
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

/// A GET being answered: the object's metadata, what part of it is sent, and the bytes.
pub struct ObjectRead {
    pub meta: Arc<ObjectMeta>,
    pub selection: Selection,
    pub body: BodyStream,
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

type Discovery = Result<Arc<ObjectMeta>, ReadError>;

struct Inner {
    cache: BlockCache,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    settings: ReadSettings,
    clock: MetaClock,
    discoveries: Coalescer<ObjectRef, Discovery>,
}

/// The read path. Cheap to clone.
#[derive(Clone)]
pub struct ReadPath {
    inner: Arc<Inner>,
}

impl ReadPath {
    pub fn new(
        cache: BlockCache,
        upstream: Arc<Upstream>,
        metrics: Arc<Metrics>,
        settings: ReadSettings,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cache,
                upstream,
                metrics,
                settings,
                clock: MetaClock::new(),
                discoveries: Coalescer::default(),
            }),
        }
    }

    /// The object's metadata, for a HEAD.
    pub async fn head(&self, object: &ObjectRef) -> Result<Arc<ObjectMeta>, ReadError> {
        self.resolve_meta(object, Probe::Head).await
    }

    /// Starts a GET of `range` of `object`. The first block is read before this returns,
    /// so every error that can still become a status code does.
    pub async fn get(
        &self,
        object: &ObjectRef,
        range: Option<RangeRequest>,
    ) -> Result<ObjectRead, ReadError> {
        let probe = Probe::for_range(range, self.inner.settings.block_size);
        let mut retried = false;
        loop {
            let meta = self.resolve_meta(object, probe).await?;
            let selection = Selection::resolve(range, meta.size)?;
            let Some(bytes) = selection.bytes(meta.size) else {
                return Ok(ObjectRead {
                    meta,
                    selection,
                    body: empty_body(),
                });
            };
            let layout = BlockLayout::new(self.inner.settings.block_size, meta.size);
            let first_index = layout.block_of(bytes.first());
            match self.block(object, &meta, layout, first_index).await {
                Ok(first_block) => {
                    let body =
                        self.stream(object.clone(), meta.clone(), layout, bytes, first_block);
                    return Ok(ObjectRead {
                        meta,
                        selection,
                        body,
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

    /// Forgets the object's metadata so the next request asks the upstream.
    pub fn invalidate(&self, object: &ObjectRef) {
        self.inner.cache.remove_meta(object);
    }

    fn stream(
        &self,
        object: ObjectRef,
        meta: Arc<ObjectMeta>,
        layout: BlockLayout,
        bytes: ByteRange,
        first_block: (Bytes, Tier),
    ) -> BodyStream {
        let (sender, receiver) = mpsc::channel(1);
        let this = self.clone();
        tokio::spawn(async move {
            let mut blocks = layout.blocks_for(bytes);
            let Some(first_index) = blocks.next() else {
                return;
            };
            if !this
                .send_slice(&sender, layout, bytes, first_index, first_block)
                .await
            {
                return;
            }
            let readahead = this.inner.settings.readahead_blocks;
            let mut fetches = futures::stream::iter(blocks)
                .map(|index| {
                    let this = this.clone();
                    let object = object.clone();
                    let meta = meta.clone();
                    async move { (index, this.block(&object, &meta, layout, index).await) }
                })
                .buffered(readahead);
            while let Some((index, result)) = fetches.next().await {
                match result {
                    Ok(block) => {
                        if !this.send_slice(&sender, layout, bytes, index, block).await {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%object, index, %error, "aborting a response after its headers were sent");
                        if matches!(error, ReadError::Changed) {
                            this.inner.cache.remove_meta(&object);
                        }
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                }
            }
        });
        ReceiverStream::new(receiver)
    }

    /// Sends the requested part of one block; false when the client has gone.
    async fn send_slice(
        &self,
        sender: &mpsc::Sender<Result<Bytes, ReadError>>,
        layout: BlockLayout,
        bytes: ByteRange,
        index: BlockIndex,
        (block, tier): (Bytes, Tier),
    ) -> bool {
        let slice = block.slice(layout.slice_within(index, bytes));
        self.inner
            .metrics
            .count_served(tier.as_str(), slice.len() as u64);
        sender.send(Ok(slice)).await.is_ok()
    }

    /// One block of the object version `meta` describes, from the cache or the upstream.
    async fn block(
        &self,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
        layout: BlockLayout,
        index: BlockIndex,
    ) -> Result<(Bytes, Tier), ReadError> {
        let range = layout
            .block_range(index)
            .ok_or_else(|| ReadError::Internal(format!("block {index} is outside the object")))?;
        let key = BlockKey {
            object: object.clone(),
            version: meta.version_token().into(),
            index,
        };
        let fetch = {
            let upstream = self.inner.upstream.clone();
            let object = object.clone();
            let meta = meta.clone();
            move || fetch_block(upstream, object, meta, range)
        };
        let inner = &self.inner;
        let result = match inner.cache.block(&key, fetch.clone()).await {
            Ok(found) => Ok(found),
            Err(LookupError::Fetch(error)) => Err(ReadError::from_upstream(error)),
            Err(LookupError::Cache(error)) => {
                // The cache failed, not the object: serve this block straight from upstream.
                tracing::warn!(%object, index, %error, "cache lookup failed; reading the block from upstream");
                fetch()
                    .await
                    .map(|bytes| (bytes, Tier::Upstream))
                    .map_err(ReadError::from_upstream)
            }
        };
        let (bytes, tier) = result?;
        inner.metrics.count_block(match tier {
            Tier::Memory => "memory_hit",
            Tier::Disk => "disk_hit",
            Tier::Upstream => "miss",
            Tier::Coalesced => "coalesced",
        });
        if bytes.len() as u64 != range.len_bytes() {
            return Err(ReadError::Internal(format!(
                "block {index} of {object} holds {} bytes, expected {}",
                bytes.len(),
                range.len_bytes()
            )));
        }
        Ok((bytes, tier))
    }

    /// Fresh metadata from the cache, or from one coalesced upstream request.
    async fn resolve_meta(
        &self,
        object: &ObjectRef,
        probe: Probe,
    ) -> Result<Arc<ObjectMeta>, ReadError> {
        let inner = &self.inner;
        let cached = match inner.cache.meta(object).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(%object, %error, "metadata lookup failed; asking the upstream");
                None
            }
        };
        if let Some(record) = &cached {
            match &record.state {
                MetaState::Found(meta)
                    if inner.clock.is_fresh(record, inner.settings.metadata_ttl) =>
                {
                    inner.metrics.count_metadata("fresh");
                    return Ok(meta.clone());
                }
                MetaState::Missing(missing)
                    if inner
                        .clock
                        .is_fresh_negative(record, inner.settings.negative_ttl) =>
                {
                    inner.metrics.count_metadata("negative");
                    return Err(ReadError::NotFound(*missing, None));
                }
                _ => {}
            }
        }
        let known = cached.as_ref().and_then(MetaRecord::meta).cloned();
        let this = self.clone();
        let key = object.clone();
        let object = object.clone();
        let (result, _) = inner
            .discoveries
            .run(key, move || async move {
                this.discover(&object, known, probe).await
            })
            .await;
        result.map_err(|error| ReadError::Internal(error.to_string()))?
    }

    /// Asks the upstream about an object whose cached metadata is missing or stale.
    async fn discover(
        &self,
        object: &ObjectRef,
        known: Option<Arc<ObjectMeta>>,
        probe: Probe,
    ) -> Discovery {
        let outcome = match (&known, probe) {
            (Some(known), _) => self.revalidate(object, known).await,
            (None, Probe::Head) => self.head_fresh(object).await,
            (None, Probe::Block(_) | Probe::Tail) => self.probe_get(object, probe).await,
        };
        match outcome {
            Ok(meta) => {
                self.inner.cache.insert_meta(
                    object,
                    self.inner.clock.record(MetaState::Found(meta.clone())),
                );
                Ok(meta)
            }
            Err(UpstreamError::NotFound {
                missing,
                request_id,
            }) => {
                self.inner.metrics.count_metadata("missing");
                if !self.inner.settings.negative_ttl.is_zero() {
                    self.inner
                        .cache
                        .insert_meta(object, self.inner.clock.record(MetaState::Missing(missing)));
                } else {
                    self.inner.cache.remove_meta(object);
                }
                Err(ReadError::NotFound(missing, request_id))
            }
            Err(error) => Err(ReadError::from_upstream(error)),
        }
    }

    /// One conditional HEAD: unchanged keeps the known metadata.
    async fn revalidate(
        &self,
        object: &ObjectRef,
        known: &Arc<ObjectMeta>,
    ) -> Result<Arc<ObjectMeta>, UpstreamError> {
        let etag = (!known.etag.is_empty()).then_some(known.etag.as_str());
        match self.inner.upstream.head(object, etag).await? {
            HeadOutcome::NotModified => {
                self.inner.metrics.count_metadata("revalidated");
                Ok(known.clone())
            }
            HeadOutcome::Found(meta) if *meta == **known => {
                self.inner.metrics.count_metadata("revalidated");
                Ok(known.clone())
            }
            HeadOutcome::Found(meta) => {
                self.inner.metrics.count_metadata("changed");
                Ok(Arc::new(*meta))
            }
        }
    }

    async fn head_fresh(&self, object: &ObjectRef) -> Result<Arc<ObjectMeta>, UpstreamError> {
        match self.inner.upstream.head(object, None).await? {
            HeadOutcome::Found(meta) => {
                self.inner.metrics.count_metadata("fetched");
                Ok(Arc::new(*meta))
            }
            HeadOutcome::NotModified => Err(UpstreamError::invalid_response(
                "304 for an unconditional HEAD",
            )),
        }
    }

    /// One ranged GET that returns the metadata and the first block the caller needs.
    async fn probe_get(
        &self,
        object: &ObjectRef,
        probe: Probe,
    ) -> Result<Arc<ObjectMeta>, UpstreamError> {
        let block_size = self.inner.settings.block_size;
        let range = match probe {
            Probe::Block(index) => {
                let first = index.saturating_mul(block_size);
                format!("bytes={first}-{}", first.saturating_add(block_size - 1))
            }
            Probe::Tail | Probe::Head => format!("bytes=-{block_size}"),
        };
        let read = match self
            .inner
            .upstream
            .get_range(object, &range, None, block_size)
            .await
        {
            Ok(read) => read,
            // The offset is past the end (or the object is empty): learn the size from a HEAD.
            Err(UpstreamError::InvalidRange { .. }) => return self.head_fresh(object).await,
            Err(error) => return Err(error),
        };
        self.inner.metrics.count_metadata("fetched");
        let meta = Arc::new(read.meta);
        self.cache_whole_blocks(object, &meta, read.first, read.body);
        Ok(meta)
    }

    /// Caches every block that lies wholly inside bytes read from offset `first`.
    fn cache_whole_blocks(
        &self,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
        first: u64,
        body: Bytes,
    ) {
        let Some(read) = (body.len() as u64)
            .checked_sub(1)
            .and_then(|last| ByteRange::new(first, first + last))
        else {
            return;
        };
        let layout = BlockLayout::new(self.inner.settings.block_size, meta.size);
        let version: Arc<str> = meta.version_token().into();
        for index in layout.blocks_for(read) {
            let Some(block) = layout.block_range(index) else {
                continue;
            };
            if block.first() < read.first() || block.last() > read.last() {
                continue;
            }
            let start = (block.first() - first) as usize;
            let end = start + block.len_bytes() as usize;
            let key = BlockKey {
                object: object.clone(),
                version: version.clone(),
                index,
            };
            self.inner.cache.insert_block(key, body.slice(start..end));
        }
    }
}

/// Fetches one block of the version `meta` describes; a different version is an error.
async fn fetch_block(
    upstream: Arc<Upstream>,
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    range: ByteRange,
) -> Result<Bytes, UpstreamError> {
    let if_match = (!meta.etag.is_empty()).then_some(meta.etag.as_str());
    let read = upstream
        .get_range(&object, &range.header_value(), if_match, range.len_bytes())
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
