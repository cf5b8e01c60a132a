//! The block step ([`Blocks`]): one block's bytes from the cache, or fetched once
//! (coalesced, hedged) from the block source or the block's owner, and cached.
//!
//! Invariants: a block is fetched for the version its target names, with `If-Match`, and
//! its length is checked before a byte of it is used. The lookups of one block under way
//! share one answer latch, which arrives when the fetch one of them leads is answered.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;
use tracing::field::Empty;

use super::claims::{Bringer, Claims};
use super::discovered::Discovered;
use super::fetch::{BlockFetch, Owner};
use super::fills::FillSlots;
use super::hedge::Hedger;
use super::integrity::Integrity;
use super::stream::{Has, Interest, StreamParts, Streams};
use super::verify::Verifier;
use super::{Internal, ReadError, Target};
use crate::budget::{Charge, MemoryBudget};
use crate::cache::{BlockCache, BlockKey, Keep, LookupError, Part, Tier};
use crate::fill_threads::FillThreads;
use crate::source::ResponseHead;
use crate::source::{BlockSource, BlocksAsk, PeerError, PeerId, Peers, UpstreamError};
use crate::telemetry::{Metrics, TRACE_TARGET};
use crate::types::{BlockIndex, ByteRange, ObjectRef};

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

    /// Opens the origin streams that bring the blocks `wanted` of `target` the cache does
    /// not hold (nor `discovered`, nor, in cluster mode, their owners), and joins those
    /// under way that bring some (see `stream.rs`); the read holds the interests while it
    /// needs the blocks.
    pub(super) async fn open_streams(
        &self,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
        discovered: &Discovered,
    ) -> Vec<Interest> {
        let here = |index| {
            discovered.block(index).is_some()
                || self.holds(&target.key(index), target.layout.block_len(index))
        };
        let Some(peers) = &self.inner.peers else {
            return self.streams_here(target, wanted, &here);
        };
        let (elsewhere, claimed) = self
            .held_elsewhere(peers, target, wanted.clone(), &here)
            .await;
        let has = |index| match (here(index), elsewhere.contains(&index)) {
            (true, _) => Has::Here,
            (false, true) => Has::Elsewhere,
            (false, false) => Has::Missing,
        };
        let interests = self.inner.streams.open(target, wanted, has);
        if !claimed.is_empty() {
            // The blocks this read claimed that none of its streams brings after all.
            for index in claimed {
                let key = target.key(index);
                if !self.inner.streams.brings(&key) {
                    self.inner.claims.release_here(&key);
                }
            }
            self.inner.streams.claims_settled();
        }
        interests
    }

    /// The streams of a prefetch of the blocks `wanted` of `target`, as
    /// [`Self::open_streams`] opens them on one node; none in cluster mode, where a
    /// prefetch asks each block of its owner (docs/cluster.md, "Cold reads in a fleet").
    pub(super) fn prefetch_streams(
        &self,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
    ) -> Vec<Interest> {
        if self.inner.peers.is_some() {
            return Vec::new();
        }
        let here = |index| self.holds(&target.key(index), target.layout.block_len(index));
        self.streams_here(target, wanted, &here)
    }

    /// The streams of the blocks `wanted` of `target` but those this node has (`here`),
    /// with no other member to ask.
    fn streams_here(
        &self,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
        here: &impl Fn(BlockIndex) -> bool,
    ) -> Vec<Interest> {
        let has = |index| match here(index) {
            true => Has::Here,
            false => Has::Missing,
        };
        self.inner.streams.open(target, wanted, has)
    }

    /// The blocks `wanted` of `target` this node does not hold (`here`) that another
    /// member holds or brings, so no stream of this node is to bring them: this node's
    /// own blocks another member claimed (see `claims.rs`; those no one did are claimed
    /// for this node), and the others' blocks their owners said they hold or have coming,
    /// asked of each owner at once (each claims the rest for this node). A member that
    /// does not answer holds all of its blocks: they are asked of it by block. A read that
    /// misses fewer than two blocks here opens no stream, and asks no one. Also the blocks
    /// this read claimed (none, when it asked no one).
    async fn held_elsewhere(
        &self,
        peers: &Arc<dyn Peers>,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
        here: &impl Fn(BlockIndex) -> bool,
    ) -> (HashSet<BlockIndex>, Vec<BlockIndex>) {
        let block_size = target.layout.block_size();
        let missed: Vec<BlockIndex> = wanted.filter(|index| !here(*index)).collect();
        if missed.len() < 2 {
            let elsewhere = missed
                .into_iter()
                .filter(|index| self.owner(target, *index).is_some())
                .collect();
            return (elsewhere, Vec::new());
        }
        let mut owned: HashMap<PeerId, Vec<BlockIndex>> = HashMap::new();
        let mut elsewhere = HashSet::new();
        for index in missed.iter().copied() {
            // Claimed for this node at once: a lookup here waits for this read's streams
            // rather than fetch a block one of them is about to bring.
            let claimed = self.inner.claims.claim(&target.key(index), Bringer::Here);
            match peers.owner(&target.object, block_size, index) {
                Some(owner) => owned.entry(owner).or_default().push(index),
                None if !claimed => {
                    elsewhere.insert(index);
                }
                None => {}
            }
        }
        let asked = owned.iter().map(|(owner, indexes)| {
            let ask = BlocksAsk {
                object: &target.object,
                meta: &target.meta,
                block_size,
                indexes,
            };
            peers.held(owner, ask)
        });
        let answers = futures::future::join_all(asked).await;
        // The rest their owners claimed for this node: its lookups of them fetch them from
        // the origin (when no stream brings them) rather than from owners that would ask
        // this node back.
        elsewhere.extend(answers.into_iter().flatten());
        (elsewhere, missed)
    }

    /// Of the blocks `indexes` of `target` (this node's), those the cache holds whole or a
    /// stream brings; the others are claimed for `member` (see `claims.rs`).
    pub(super) fn held_or_claimed(
        &self,
        target: &Target,
        indexes: &[BlockIndex],
        member: &PeerId,
    ) -> Vec<BlockIndex> {
        let bringer = Bringer::Member(member.clone());
        indexes
            .iter()
            .copied()
            .filter(|index| target.layout.block_range(*index).is_some())
            .filter(|index| {
                let key = target.key(*index);
                self.holds(&key, target.layout.block_len(*index))
                    || self.inner.streams.brings(&key)
                    || !self.inner.claims.claim(&key, bringer.clone())
            })
            .collect()
    }

    /// Block `index` of `target`, which another member's stream brought for this node
    /// (its owner): cached, and its claim ends.
    pub(super) async fn handed(&self, target: &Target, index: BlockIndex, bytes: Bytes) {
        let key = target.key(index);
        if !self.holds(&key, target.layout.block_len(index)) {
            self.inner.cache.insert_fetched(key.clone(), bytes).await;
        }
        self.inner.claims.release(&key);
    }

    /// Notes that a lookup here asks another member for block `key`, until the note is
    /// dropped: a member that asks this node for it meanwhile does not wait for that
    /// lookup (see [`Self::serve_peer`]).
    fn asking(&self, key: BlockKey) -> Asking {
        *self.inner.asking.lock().entry(key.clone()).or_default() += 1;
        Asking {
            blocks: self.clone(),
            key,
        }
    }

    /// The member a fetch of block `index` of `target` asks first, when no stream of this
    /// node brings it: `owner`, or, for a block of this node's, the member whose stream
    /// brings it, while its claim holds.
    fn ask_first(&self, target: &Target, index: BlockIndex, owner: Owner) -> Owner {
        let peers = self.inner.peers.as_ref()?;
        match (owner, self.inner.claims.bringer(&target.key(index))) {
            (Some(owner), _) => Some(owner),
            (None, Some(Bringer::Member(member))) => Some((peers.clone(), member)),
            (None, _) => None,
        }
    }

    /// The part of block `index` of `target` inside `bytes`: from a block the metadata
    /// discovery read, else through the cache. `answered` arrives when the upstream (or
    /// the block's owner) has begun to send the block for a fetch this lookup started:
    /// from then on the block's version can no longer fail it.
    pub(super) async fn block_or_discovered(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        discovered: &Discovered,
        answered: &ResponseHead,
    ) -> Result<Part, ReadError> {
        let within = target.layout.slice_within(index, bytes);
        match discovered.block(index) {
            Some(block) => {
                let span = lookup_span(index);
                self.counted(&span, discovered.tier);
                let slice = slice_of(&block, within.clone()).ok_or_else(|| {
                    ReadError::Internal(Internal::WrongLength {
                        object: target.object.clone(),
                        index,
                        got: block.len(),
                        wanted: within.end,
                    })
                })?;
                Ok(Part::whole(charge.attach(slice), discovered.tier))
            }
            None => {
                let owner = self.owner(target, index);
                self.lookup(target, index, within, owner, charge, answered)
                    .await
            }
        }
    }

    /// Bytes `within` block `index` of `target` through the cache (from `owner` when
    /// another member owns it), counted as a lookup and carrying `charge` until their last
    /// slice is dropped; `answered` as in [`Self::block_or_discovered`].
    async fn lookup(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        owner: Owner,
        charge: Charge,
        answered: &ResponseHead,
    ) -> Result<Part, ReadError> {
        let span = lookup_span(index);
        // A block memory holds is sliced before anything a fetch needs is made.
        let held = match owner {
            None => self.held_in_memory(target, index, within.clone()),
            Some(_) => None,
        };
        let part = match held {
            Some(part) => part,
            None => {
                self.cache_block(target, index, within.clone(), owner, answered)
                    .instrument(span.clone())
                    .await?
            }
        };
        Ok(self.looked_up(&span, target, index, within, part, charge))
    }

    /// Bytes `within` block `index` of `target` when the memory tier holds the block.
    fn held_in_memory(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
    ) -> Option<Part> {
        let block_len = usize::try_from(target.layout.block_len(index)).ok()?;
        let key = target.key(index);
        let cache = &self.inner.cache;
        cache
            .memory_part(&key, block_len, within, Keep::Everywhere)
            .ok()
            .flatten()
    }

    /// The part of block `index` of `target` inside `bytes` when the memory tier holds
    /// the block, another member does not own it, and `budget` has free room for it:
    /// found without a task or a wait, counted as a lookup like any other. `None`
    /// otherwise, and the block is looked up the usual way.
    pub(super) fn in_memory(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        budget: &MemoryBudget,
    ) -> Option<Part> {
        if self.owner(target, index).is_some() {
            return None;
        }
        let within = target.layout.slice_within(index, bytes);
        let charge = budget.try_reserve(within.len() as u64)?;
        let part = self.held_in_memory(target, index, within.clone())?;
        let span = lookup_span(index);
        Some(self.looked_up(&span, target, index, within, part, charge))
    }

    /// `part`, found by a lookup of the bytes `within` block `index`: counted, sampled
    /// for verification when the cache held it, and carrying `charge`.
    fn looked_up(
        &self,
        span: &tracing::Span,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        part: Part,
        charge: Charge,
    ) -> Part {
        self.counted(span, part.tier);
        if matches!(part.tier, Tier::Memory | Tier::Disk) {
            // A hit of a whole block helps judge a version being filled around it.
            if within.start == 0 && within.end as u64 == target.layout.block_len(index) {
                self.inner.integrity.hit(target, index, &part.slices);
            }
            if let Some(verifier) = &self.inner.verifier {
                verifier.hit(target, index, within, &part);
            }
        }
        Part {
            slices: charge.attach_all(part.slices),
            ..part
        }
    }

    /// The bytes `within` block `index` of the version `meta` names, for a member that
    /// asked this node (its owner) for them: from the cache, or from the whole block
    /// fetched once from this node's own source, or from the member whose stream brings
    /// it (see `claims.rs`). A block of another member's (the owner asked this node,
    /// whose stream it claimed for, or the members' views of the membership differ for a
    /// moment) is looked up here as this node's own, unless a lookup here is asking a
    /// member for it: then it comes from memory, from a stream of this node's, or from the
    /// source, never after that lookup, so requests cannot go round in circles. `charge`
    /// covers the bytes asked for.
    pub(super) async fn serve_peer(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<u64>,
        charge: Charge,
    ) -> Result<Part, ReadError> {
        let length = target.layout.block_len(index);
        if target.layout.block_range(index).is_none()
            || within.start >= within.end
            || within.end > length
        {
            return Err(ReadError::Internal(Internal::OutsideObject {
                index,
                within,
            }));
        }
        let within = within.start as usize..within.end as usize;
        let answered = ResponseHead::default();
        let key = target.key(index);
        if self.owner(target, index).is_none() || !self.inner.asking.lock().contains_key(&key) {
            return self
                .lookup(target, index, within, None, charge, &answered)
                .await;
        }
        let span = lookup_span(index);
        let part = match self.held_in_memory(target, index, within.clone()) {
            Some(part) => part,
            None => {
                let fetch = BlockFetch {
                    patient: true,
                    ..self.block_fetch(target, index, &answered)?
                };
                let block = match fetch.streamed(&self.inner.streams).await {
                    Some(result) => result,
                    None => fetch.run(None, ResponseHead::default()).await,
                };
                let block = block.map_err(ReadError::from_upstream)?;
                let got = block.len();
                let slice = slice_of(&block, within.clone()).ok_or_else(|| {
                    ReadError::Internal(Internal::WrongLength {
                        object: target.object.clone(),
                        index,
                        got,
                        wanted: within.end,
                    })
                })?;
                Part::whole(slice, Tier::Upstream)
            }
        };
        Ok(self.looked_up(&span, target, index, within, part, charge))
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

    /// The member that owns block `index` of `target`, when cluster mode is on and it is
    /// not this node.
    fn owner(&self, target: &Target, index: BlockIndex) -> Owner {
        let peers = self.inner.peers.as_ref()?;
        let owner = peers.owner(&target.object, target.layout.block_size(), index)?;
        Some((peers.clone(), owner))
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

    /// Records where a block came from on its lookup span and in the lookup metric.
    fn counted(&self, span: &tracing::Span, tier: Tier) {
        span.record("cache.tier", tier.as_str());
        span.record("cache.hit", matches!(tier, Tier::Memory | Tier::Disk));
        self.inner.metrics.count_block(tier.lookup());
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

/// A lookup's note that it is asking another member for a block, until dropped.
struct Asking {
    blocks: Blocks,
    key: BlockKey,
}

impl Drop for Asking {
    fn drop(&mut self) {
        let mut asking = self.blocks.inner.asking.lock();
        if let Some(count) = asking.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                asking.remove(&self.key);
            }
        }
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
