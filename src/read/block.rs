//! The block step ([`Blocks`]): one block's bytes from the cache, or fetched once
//! (coalesced, hedged) from the block source or the block's owner, and cached. Its lookup
//! is in `block/lookup.rs`, the origin streams a read opens through it in
//! `block/streams.rs`, and its part in a fleet in `block/fleet.rs`.
//!
//! Invariants: a block is fetched for the version its target names, with `If-Match`, and
//! its length is checked before a byte of it is used. The lookups of one block under way
//! share one answer latch, which arrives when the fetch one of them leads is answered.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;
use tracing::field::Empty;

mod fleet;
mod lookup;
mod streams;

use super::claims::Claims;
use super::fetch::{BlockFetch, Owner};
use super::fills::FillSlots;
use super::hedge::Hedger;
use super::integrity::Integrity;
use super::stream::{StreamParts, Streams};
use super::verify::Verifier;
use super::{Internal, ReadError, Target};
use crate::cache::{BlockCache, BlockKey, Keep, LookupError, Part, Tier};
use crate::fill_threads::FillThreads;
use crate::source::ResponseHead;
use crate::source::{BlockSource, PeerError, Peers, UpstreamError};
use crate::telemetry::{Metrics, TRACE_TARGET};
use crate::types::{BlockIndex, ObjectRef};

/// The block step. Cheap to clone.
#[derive(Clone)]
pub(super) struct Blocks {
    inner: Arc<Inner>,
}

struct Inner {
    cache: BlockCache,
    source: Arc<dyn BlockSource>,
    metrics: Arc<Metrics>,
    hedger: Hedger,
    /// The slots upstream fetches take, shared between tenants.
    fills: FillSlots,
    /// Where the fetches run.
    fill_threads: FillThreads,
    /// The other cluster members, in cluster mode.
    peers: Option<Arc<dyn Peers>>,
    integrity: Integrity,
    /// Verify mode, when it is on.
    verifier: Option<Verifier>,
    /// The origin streams that bring many blocks of a read at once.
    streams: Streams,
    /// This node's blocks that other members' streams bring, in cluster mode.
    claims: Claims,
    /// The blocks a lookup here is asking another member for, with how many do.
    asking: parking_lot::Mutex<HashMap<BlockKey, usize>>,
    /// For each block being looked up, the latch its lookups share (see
    /// [`Blocks::answer_latch`]).
    answers: parking_lot::Mutex<HashMap<BlockKey, ResponseHead>>,
}

/// What the block step is made of.
pub(super) struct BlockParts {
    pub cache: BlockCache,
    pub source: Arc<dyn BlockSource>,
    pub metrics: Arc<Metrics>,
    pub hedger: Hedger,
    pub fills: FillSlots,
    pub fill_threads: FillThreads,
    /// The other cluster members, in cluster mode.
    pub peers: Option<Arc<dyn Peers>>,
    pub integrity: Integrity,
    /// Verify mode, when it is on.
    pub verifier: Option<Verifier>,
}

impl Blocks {
    pub(super) fn new(parts: BlockParts) -> Self {
        let BlockParts {
            cache,
            source,
            metrics,
            hedger,
            fills,
            fill_threads,
            peers,
            integrity,
            verifier,
        } = parts;
        let claims = Claims::default();
        let streams = Streams::new(StreamParts {
            source: source.clone(),
            peers: peers.clone(),
            claims: claims.clone(),
            cache: cache.clone(),
            integrity: integrity.clone(),
            fills: fills.clone(),
            fill_threads: fill_threads.clone(),
            metrics: metrics.clone(),
        });
        Self {
            inner: Arc::new(Inner {
                cache,
                source,
                metrics,
                hedger,
                fills,
                fill_threads,
                peers,
                integrity,
                verifier,
                streams,
                claims,
                asking: parking_lot::Mutex::default(),
                answers: parking_lot::Mutex::default(),
            }),
        }
    }

    pub(super) fn fill_slots(&self) -> &FillSlots {
        &self.inner.fills
    }

    /// The tenant of fetches no request's tenant is known for: warm jobs, and other
    /// members' that name none this node knows.
    pub(super) fn default_tenant(&self) -> Arc<crate::tenant::Tenant> {
        self.inner.fills.default_fill().tenant
    }

    /// Whether the cache holds block `key` of `length` bytes whole (in memory, or every
    /// piece on disk); nothing is read.
    pub(super) fn holds(&self, key: &BlockKey, length: u64) -> bool {
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        self.inner.cache.holds(key, length)
    }

    /// Caches `bytes` as block `key` (bytes the metadata step or a write already has).
    pub(super) fn insert(&self, key: BlockKey, bytes: Bytes) {
        self.inner.cache.insert_block(key, bytes);
    }

    /// Drops block `key` from the cache; whether it was held.
    pub(super) fn remove(&self, key: &BlockKey) -> bool {
        self.inner.cache.remove_block(key)
    }

    /// Raises `object`'s purge generation, across restarts: no block of it cached before
    /// is found again, of any version, and the end-to-end check forgets what it hashed of
    /// them.
    pub(super) fn purge(&self, object: &ObjectRef) -> Result<(), crate::cache::CacheError> {
        self.inner.integrity.forget(object);
        self.inner.cache.purge(object)
    }

    /// The latch the lookups of `key` under way share: the one that leads the block's
    /// fetch makes it arrive when the fetch is answered, so a GET that joined that fetch
    /// knows as early as the leader when the block's version is settled. Held until the
    /// lookup ends (however it ends); later lookups then start a latch of their own.
    pub(super) fn answer_latch(&self, key: &BlockKey) -> AnswerLatch {
        let latch = self
            .inner
            .answers
            .lock()
            .entry(key.clone())
            .or_default()
            .clone();
        AnswerLatch {
            blocks: self.clone(),
            key: key.clone(),
            latch,
        }
    }

    /// The origin streams.
    pub(super) fn streams(&self) -> &Streams {
        &self.inner.streams
    }

    /// The fetch of block `index` of `target`, whose first answer `answered` learns of.
    fn block_fetch(
        &self,
        target: &Target,
        index: BlockIndex,
        answered: &ResponseHead,
    ) -> Result<BlockFetch, ReadError> {
        let range = target.layout.block_range(index).ok_or_else(|| {
            ReadError::Internal(Internal::OutsideObject {
                index,
                within: 0..0,
            })
        })?;
        Ok(BlockFetch {
            source: self.inner.source.clone(),
            target: target.clone(),
            range,
            index,
            metrics: self.inner.metrics.clone(),
            integrity: self.inner.integrity.clone(),
            answered: answered.clone(),
            fills: self.inner.fills.clone(),
            patient: false,
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
        let owner = self.owner(target, index);
        let hold = self.answer_latch(&target.key(index));
        self.cache_block(target, index, 0..length, owner, &hold.latch)
            .await
            .map(drop)
    }

    /// Bytes `within` block `index` of `target` through the cache (the block is fetched
    /// and cached on a miss), their length checked. A block `owner` (another member)
    /// owns is fetched from it and kept in memory only; when the owner fails, from the
    /// source. `answered` as in [`Self::block_or_discovered`].
    async fn cache_block(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        owner: Owner,
        answered: &ResponseHead,
    ) -> Result<Part, ReadError> {
        let object = &target.object;
        let fetch = self.block_fetch(target, index, answered)?;
        let range = fetch.range;
        let key = target.key(index);
        let block_len = usize::try_from(range.len_bytes()).unwrap_or(usize::MAX);
        let theirs = owner.is_some();
        let mut owner = owner;
        if let Some((peers, peer)) = &owner
            && !peers.keep_in_memory()
            && !self.inner.cache.holds(&key, block_len)
        {
            // A block an origin stream of this node brings is not asked of its owner.
            if let Some(result) = fetch.streamed(&self.inner.streams).await {
                let block = result.map_err(ReadError::from_upstream)?;
                let got = block.len();
                return slice_of(&block, within.clone())
                    .map(|slice| Part::whole(slice, Tier::Upstream))
                    .ok_or_else(|| {
                        ReadError::Internal(Internal::WrongLength {
                            object: object.clone(),
                            index,
                            got,
                            wanted: within.end,
                        })
                    });
            }
            // Nothing of it stays here: only the bytes asked for cross the network.
            let asked = within.start as u64..within.end as u64;
            let asking = self.asking(key.clone());
            let fetched = peers.fetch(peer, target.ask(index, asked), answered).await;
            drop(asking);
            match fetched {
                Ok(block) if block.bytes.len() == within.len() => {
                    return Ok(Part::whole(block.bytes, Tier::Upstream));
                }
                Ok(block) => {
                    tracing::warn!(%object, index, %peer, got = block.bytes.len(), wanted = within.len(), "block owner sent a part of the wrong length; reading the block the usual way");
                }
                Err(PeerError::Answer(error)) => return Err(ReadError::from_upstream(error)),
                Err(PeerError::Failed { reason, .. }) => {
                    tracing::warn!(%object, index, %peer, %reason, "block owner failed; reading the block the usual way");
                }
            }
            // The owner is passed over now: the next member, or this node.
            owner = self.owner(target, index);
        }
        let keep = match theirs {
            false => Keep::Everywhere,
            true => Keep::Memory,
        };
        let keep_in_memory = owner
            .as_ref()
            .is_none_or(|(peers, _)| peers.keep_in_memory());
        let streamed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fetch = {
            let blocks = self.clone();
            let streams = self.inner.streams.clone();
            let streamed = streamed.clone();
            move || {
                // Created where the lookup starts the fetch, so it is the lookup's child
                // even though the fetch runs in a task of its own.
                let span = tracing::info_span!(target: TRACE_TARGET, "upstream.fetch", http.range = %range.header_value(), peer = owner.as_ref().map(|(_, peer)| tracing::field::display(peer.clone())));
                let threads = blocks.inner.fill_threads.clone();
                let run = async move {
                    // A block an origin stream brings is not asked for again, of the
                    // origin nor of its owner.
                    if let Some(result) = fetch.streamed(&streams).await {
                        streamed.store(true, std::sync::atomic::Ordering::Release);
                        return result;
                    }
                    // The owner is asked first (for a block of this node's, the member
                    // whose stream brings it); a hedge goes to the source.
                    let mut owner = blocks.ask_first(&fetch.target, fetch.index, owner);
                    let _asking = owner
                        .is_some()
                        .then(|| blocks.asking(fetch.target.key(fetch.index)));
                    blocks
                        .inner
                        .hedger
                        .run(|head| fetch.clone().run(owner.take(), head))
                        .await
                }
                .instrument(span);
                // On the fill threads, once the cache runs it (a lookup that joins a fetch
                // in flight never polls its own).
                async move {
                    threads.spawn(run).await.unwrap_or_else(|stopped| {
                        Err(UpstreamError::unreachable(format!(
                            "the fill did not complete: {stopped}"
                        )))
                    })
                }
            }
        };
        let wanted = within.len();
        let result = match self
            .inner
            .cache
            .block(&key, block_len, within.clone(), keep, fetch.clone())
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
        // Only what this lookup fetched from the owner: a block the cache held is kept
        // by this node as its owner, and so is one whose owner failed meanwhile. One a
        // stream brought stays until its owner took it (see `stream.rs`).
        if !keep_in_memory
            && part.tier == Tier::Upstream
            && !streamed.load(std::sync::atomic::Ordering::Acquire)
            && self.owner(target, index).is_some()
        {
            self.inner.cache.remove_block(&key);
        }
        let got = part.total_bytes();
        if got != wanted {
            return Err(ReadError::Internal(Internal::WrongLength {
                object: object.clone(),
                index,
                got,
                wanted,
            }));
        }
        Ok(part)
    }
}

/// A lookup's hold on the answer latch its block's lookups share (see
/// [`Blocks::answer_latch`]); dropping it forgets the latch as the block's.
pub(super) struct AnswerLatch {
    blocks: Blocks,
    key: BlockKey,
    pub(super) latch: ResponseHead,
}

impl Drop for AnswerLatch {
    fn drop(&mut self) {
        let mut answers = self.blocks.inner.answers.lock();
        if answers
            .get(&self.key)
            .is_some_and(|held| held.same(&self.latch))
        {
            answers.remove(&self.key);
        }
    }
}

/// Bytes `within` of `block`; `None` when the block is shorter.
fn slice_of(block: &Bytes, within: std::ops::Range<usize>) -> Option<Bytes> {
    (within.start <= within.end && within.end <= block.len()).then(|| block.slice(within))
}

fn lookup_span(index: BlockIndex) -> tracing::Span {
    tracing::info_span!(target: TRACE_TARGET, "block.lookup", block.index = index, cache.tier = Empty, cache.hit = Empty)
}
