//! Origin streams ([`Streams`]): a read's uncached blocks asked of the origin in a few GETs
//! started at once, each covering many blocks, rather than one GET per block.
//!
//! When a GET starts, the blocks of its range that the cache does not hold (nor a stream
//! already brings) form runs of consecutive blocks (two runs [`GAP_BRIDGED`] cached block
//! apart are one); each run but the read's first block alone is asked for in ranged GETs of at least
//! [`BLOCKS_PER_STREAM`] blocks, at most [`STREAMS_PER_READ`] and no more than the fill
//! slots free, pinned to the version the read announced (`If-Match`, and the version id
//! when the bucket has one). A stream cuts its bytes into blocks as they arrive; each whole
//! block is checked (`integrity.rs`) and goes to the lookups waiting for it, or else into
//! the cache. The read's headers wait until each of its streams has been answered
//! ([`Interest::settled`]); from then on the origin sends the version it began with to its
//! end, as S3 does, so a long cold read that an overwrite overtakes completes with the
//! version it announced. An unknown object's discovery is a stream too
//! ([`Streams::discovered`]): its GET, unpinned, asks for up to [`DISCOVERY_BLOCKS`] of
//! the read's blocks, and its answer settles the version, so a read those cover waits for
//! no other answer before its headers.
//!
//! Coalescing across streams: while a stream will bring a block, a lookup of that block
//! (the one that leads its fetch: `cache.rs` coalesces the others behind it) waits for the
//! stream instead of asking the origin again, unless the block is more than
//! [`WAIT_AHEAD_BLOCKS`] past the block the stream is filling: such a reader fetches the
//! block alone (`portico_stream_blocks_total{result="alone"}`), as it does when the
//! stream stopped or failed other than by a changed version.
//!
//! Bounds: a stream holds one partial block in memory (its bytes go to the cache block by
//! block), runs at most [`LEAD_BLOCKS`] past the furthest block a lookup asked it for, and
//! holds one fill slot of its opener's tenant, as a block fetch does; its bytes are charged
//! to that tenant. A stream stops within a block once no reader is left (every GET that
//! opened or joined it ended, and no lookup waits for one of its blocks), keeping the
//! blocks it completed.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::{Notify, Semaphore, oneshot};
use tracing::Instrument;

use super::Target;
use super::claims::{Bringer, Claims};
use super::fills::{FillSlot, FillSlots};
use super::integrity::Integrity;
use crate::buffers::BlockBuffers;
use crate::cache::{BlockCache, BlockKey};
use crate::fill_threads::FillThreads;
use crate::source::{BlockSource, PeerId, Peers, ResponseHead, StreamedRead, UpstreamError};
use crate::telemetry::{ErrorChain, Metrics, StreamEnd, TRACE_TARGET};
use crate::tenant::{Charge, charged};
use crate::types::{BlockIndex, ByteRange};

/// Streams one read starts at most (more runs of uncached blocks are fetched by block).
pub(super) const STREAMS_PER_READ: usize = 4;
/// Blocks a stream covers at least when a run is split between several.
pub(super) const BLOCKS_PER_STREAM: u64 = 4;
/// Blocks a discovery's GET asks for at most, when its read wants that many: they come
/// in one stream, whose answer settles the read's version.
pub(super) const DISCOVERY_BLOCKS: u64 = STREAMS_PER_READ as u64 * BLOCKS_PER_STREAM;
/// How far a stream runs ahead of the furthest block its lookups asked for.
pub(super) const LEAD_BLOCKS: u64 = 8;
/// How far past the block a stream is filling a lookup still waits for it.
pub(super) const WAIT_AHEAD_BLOCKS: u64 = 8;
/// Longest a lookup waits for the read that claimed its block to open its streams (the
/// time that read's questions to the block owners take).
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Blocks streams hand to their owners at once, at most: past it a block is not handed,
/// and its owner asks for it when it needs it.
const HANDS_IN_FLIGHT: usize = 8;
/// Cached blocks a stream asks for again rather than leave a hole on each side of them to
/// be fetched alone.
const GAP_BRIDGED: u64 = 1;
/// Blocks a stream completed that a lookup still finds with it (a lookup that missed the
/// cache just before the stream put the block there).
const KEPT_BEHIND: u64 = 2;

/// The origin streams under way. Cheap to clone.
#[derive(Clone)]
pub(super) struct Streams {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn BlockSource>,
    /// The other members, in cluster mode: a block another member owns goes to it too.
    peers: Option<Arc<dyn Peers>>,
    /// Blocks handed to their owners at once, at most.
    hands: Arc<Semaphore>,
    /// The blocks this node's streams are to bring, claimed (cluster mode).
    claims: Claims,
    /// Told when a read that claimed blocks opened its streams.
    opened: Notify,
    cache: BlockCache,
    integrity: Integrity,
    fills: FillSlots,
    fill_threads: FillThreads,
    metrics: Arc<Metrics>,
    /// Every block a stream under way brings, or completed lately.
    blocks: parking_lot::Mutex<HashMap<BlockKey, Slot>>,
}

struct Slot {
    flow: Arc<Flow>,
    state: State,
}

enum State {
    /// Still to arrive; the lookups waiting for it.
    Coming(Vec<oneshot::Sender<Delivery>>),
    /// Arrived, and also in the cache.
    Arrived(Bytes),
}

/// A block a lookup waited for, or why it did not come.
type Delivery = Result<Bytes, Undelivered>;

#[derive(Debug, Clone)]
enum Undelivered {
    /// The origin's answer for the version: it changed, or is gone.
    Refused(UpstreamError),
    /// The stream stopped or broke off before the block: the lookup fetches it alone.
    Stopped,
}

/// One stream's progress, shared with the lookups and reads that wait for it.
struct Flow {
    /// The block it is filling.
    filling: AtomicU64,
    /// The furthest block a lookup asked it for: it fills no more than [`LEAD_BLOCKS`]
    /// past it, so it does not run far ahead of its readers into the cache.
    wanted: AtomicU64,
    /// Told when a lookup asks for a block further on.
    asked: Notify,
    /// Reads that opened or joined it and lookups waiting for one of its blocks.
    readers: AtomicUsize,
    /// Told when the last reader leaves.
    left: Notify,
    /// Arrives when the origin began to answer: the version is settled from then on.
    opened: ResponseHead,
    /// Arrives when the origin began to answer or the stream ended, whichever first.
    settled: ResponseHead,
    /// The origin's refusal of the version (changed, gone), when it refused it.
    refused: std::sync::OnceLock<UpstreamError>,
    /// A discovery's: its blocks are waited for however far ahead (see [`Streams::join`]),
    /// and it fills none before a lookup asks for one (so the reads that share the
    /// discovery find the blocks it brings them coming, as misses, not already cached).
    discovery: bool,
    /// Whether a lookup asked for a block yet.
    asked_yet: AtomicBool,
}

impl Flow {
    /// A stream that is to fill from block `first` on (`discovery`: the rest of a
    /// discovery's GET).
    fn new(first: BlockIndex, discovery: bool) -> Arc<Self> {
        Arc::new(Self {
            filling: AtomicU64::new(first),
            wanted: AtomicU64::new(first),
            asked: Notify::new(),
            readers: AtomicUsize::new(0),
            left: Notify::new(),
            opened: ResponseHead::default(),
            settled: ResponseHead::default(),
            refused: std::sync::OnceLock::new(),
            discovery,
            asked_yet: AtomicBool::new(false),
        })
    }

    /// A lookup asked for block `index`.
    fn asked_for(&self, index: BlockIndex) {
        let first = !self.asked_yet.swap(true, Ordering::AcqRel);
        if self.wanted.fetch_max(index, Ordering::AcqRel) < index || first {
            self.asked.notify_one();
        }
    }

    /// Returns once block `index` is at most [`LEAD_BLOCKS`] past the furthest block asked.
    async fn within_lead(&self, index: BlockIndex) {
        loop {
            let asked = self.asked.notified();
            let waits = self.discovery && !self.asked_yet.load(Ordering::Acquire);
            if !waits && index <= self.wanted.load(Ordering::Acquire) + LEAD_BLOCKS {
                return;
            }
            asked.await;
        }
    }
}

/// A stream whose origin answered: its body from the next block on, what the block read
/// last held past its end, and the fill slot the stream holds.
struct Answered {
    read: StreamedRead,
    carry: Bytes,
    _slot: FillSlot,
}

/// A read's hold on a stream: the stream runs while one is held.
pub(super) struct Interest(Arc<Flow>);

impl Interest {
    fn new(flow: &Arc<Flow>) -> Self {
        flow.readers.fetch_add(1, Ordering::AcqRel);
        Self(flow.clone())
    }
}

impl Interest {
    /// Returns once the stream's origin answered or the stream ended: the origin's refusal
    /// of the version, if it refused it. A read whose headers wait for this for every
    /// stream it holds cannot be cut off later by an overwrite: each stream then sends
    /// the version it began with to its end.
    pub(super) async fn settled(&self) -> Option<UpstreamError> {
        self.0.settled.wait().await;
        self.0.refused.get().cloned()
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if self.0.readers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.left.notify_one();
        }
    }
}

/// Whether a read has a block without a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Has {
    /// No: a stream is to bring it.
    Missing,
    /// In this node's cache, or discovered with the metadata.
    Here,
    /// Another member holds it or brings it (cluster mode): no stream of this node asks
    /// for it, not even to bridge a gap.
    Elsewhere,
}

/// What a lookup of a block finds among the streams.
pub(super) enum Joined {
    /// No stream brings it: fetch it.
    Uncovered,
    /// A stream brings it, too far ahead to wait for: fetch it alone.
    Alone,
    /// A stream brought it a moment ago.
    Arrived(Bytes),
    /// A stream will bring it.
    Waiting(Waiting),
}

/// A lookup waiting for a stream's block.
pub(super) struct Waiting {
    delivery: oneshot::Receiver<Delivery>,
    interest: Interest,
}

impl Waiting {
    /// Arrives when the stream's origin began to answer (its version is settled).
    pub(super) fn opened(&self) -> ResponseHead {
        self.interest.0.opened.clone()
    }

    /// The block; `None` when the stream stopped before it (fetch it alone).
    pub(super) async fn block(self) -> Option<Result<Bytes, UpstreamError>> {
        match self.delivery.await {
            Ok(Ok(bytes)) => Some(Ok(bytes)),
            Ok(Err(Undelivered::Refused(error))) => Some(Err(error)),
            Ok(Err(Undelivered::Stopped)) | Err(_) => None,
        }
    }
}

/// What the origin streams are made of.
pub(super) struct StreamParts {
    pub source: Arc<dyn BlockSource>,
    /// The other cluster members, in cluster mode: their blocks are handed to them.
    pub peers: Option<Arc<dyn Peers>>,
    /// This node's blocks that other members' streams bring.
    pub claims: Claims,
    pub cache: BlockCache,
    pub integrity: Integrity,
    pub fills: FillSlots,
    pub fill_threads: FillThreads,
    pub metrics: Arc<Metrics>,
}

impl Streams {
    pub(super) fn new(parts: StreamParts) -> Self {
        let StreamParts {
            source,
            peers,
            claims,
            cache,
            integrity,
            fills,
            fill_threads,
            metrics,
        } = parts;
        Self {
            inner: Arc::new(Inner {
                source,
                peers,
                hands: Arc::new(Semaphore::new(HANDS_IN_FLIGHT)),
                claims,
                opened: Notify::new(),
                cache,
                integrity,
                fills,
                fill_threads,
                metrics,
                blocks: parking_lot::Mutex::default(),
            }),
        }
    }

    /// Opens the streams that bring the blocks `wanted` of `target` for a read, but those
    /// `has` says the read has (cached, or discovered with the metadata) or another member
    /// holds or brings, and joins the streams under way that bring some of them. The read
    /// keeps the interests while it needs their blocks.
    pub(super) fn open(
        &self,
        target: &Target,
        wanted: RangeInclusive<BlockIndex>,
        has: impl Fn(BlockIndex) -> Has,
    ) -> Vec<Interest> {
        let first = *wanted.start();
        let needed: Vec<(BlockIndex, Has)> = wanted.map(|index| (index, has(index))).collect();
        let mut interests: Vec<Interest> = Vec::new();
        let mut runs: Vec<RangeInclusive<BlockIndex>> = Vec::new();
        {
            let mut blocks = self.inner.blocks.lock();
            let mut run: Option<RangeInclusive<BlockIndex>> = None;
            // Blocks a stream is not to ask for again to bridge a gap.
            let mut unbridgeable = Vec::new();
            for (index, has) in needed {
                let flow = blocks.get(&target.key(index)).map(|slot| &slot.flow);
                if has != Has::Missing || flow.is_some() {
                    runs.extend(run.take());
                }
                if flow.is_some() || has == Has::Elsewhere {
                    unbridgeable.push(index);
                }
                if let Some(flow) = flow
                    && !interests.iter().any(|held| Arc::ptr_eq(&held.0, flow))
                {
                    interests.push(Interest::new(flow));
                }
                if has == Has::Missing && flow.is_none() {
                    run = Some(run.map_or(index..=index, |run| *run.start()..=index));
                }
            }
            runs.extend(run);
            // In cluster mode a hole is streamed alone instead (see below): a cached block
            // there is often another member's, kept in memory, and would come twice.
            let clustered = self.inner.peers.is_some();
            let runs = bridged(runs, |gap| {
                !clustered && !unbridgeable.iter().any(|index| gap.contains(index))
            });
            // No more streams than fill slots free now: one that waits for a slot would
            // start late, and might find the version gone.
            let fill = target.fill_or_default(&self.inner.fills);
            // On one node the read's first block, when it is a hole of its own, is fetched
            // alone (hedged; the read waits for it before its headers anyway); a single
            // block further on is streamed, so that its answer too comes before the
            // headers (one left after the discovery's blocks, or between cached ones).
            // In cluster mode a read opens as many streams as fill slots are free: the
            // blocks the owners claimed for this node are scattered among those other
            // members hold, and the lookups the owners send here join the streams.
            let (most, alone) = match self.inner.peers {
                Some(_) => (usize::MAX, None),
                None => (STREAMS_PER_READ, Some(first)),
            };
            let room = self.inner.fills.free_for(&fill).clamp(1, most);
            let mut parts = split(&runs, room, alone);
            for part in &mut parts {
                let flow = Flow::new(*part.start(), false);
                bring(&mut blocks, target, part, &flow);
                interests.push(Interest::new(&flow));
                self.spawn(target, part.clone(), flow, None);
            }
        }
        interests
    }

    /// The discovery of `target` was answered with `read`, a GET of its first blocks
    /// that named the version, and holds the fill `slot`: reads the first block, and
    /// streams the rest of `read` as a stream of its own, which the reads that share the
    /// discovery join. So a cold read of a few blocks costs one origin GET, and its
    /// headers wait for no other answer. Returns the first block's index and bytes, and
    /// the hold on the stream of the rest (`None` when `read` holds one block).
    pub(super) async fn discovered(
        &self,
        target: &Target,
        mut read: StreamedRead,
        slot: FillSlot,
    ) -> Result<(BlockIndex, Bytes, Option<Interest>), UpstreamError> {
        let layout = &target.layout;
        let first = layout.block_of(read.first);
        let whole = |index| layout.block_range(index);
        let end = read.first.saturating_add(read.length).saturating_sub(1);
        let last = layout.block_of(end);
        // The answer covers whole blocks but for the object's last: the rest of a block
        // cut short is not streamed.
        let last = match whole(last) {
            Some(block) if block.last() == end => last,
            _ => last.saturating_sub(1),
        };
        let starts_a_block = whole(first).is_some_and(|block| block.first() == read.first);
        if read.length == 0 || !starts_a_block || last < first {
            return Err(UpstreamError::invalid_response(
                "the discovery's answer does not start with a whole block",
            ));
        }
        let mut carry = Bytes::new();
        let length = layout.block_len(first);
        let fill = target.fill_or_default(&self.inner.fills);
        let block = next_block(&mut read, length, self.inner.cache.buffers(), &mut carry)
            .await
            .map_err(|_| UpstreamError::unreachable("response body interrupted"))?;
        fill.fetched(block.len());
        if last == first {
            return Ok((first, block, None));
        }
        let part = first + 1..=last;
        let flow = Flow::new(*part.start(), true);
        flow.opened.arrived();
        flow.settled.arrived();
        let interest = Interest::new(&flow);
        bring(&mut self.inner.blocks.lock(), target, &part, &flow);
        self.inner.metrics.streams.count_opened();
        let answered = Answered {
            read,
            carry,
            _slot: slot,
        };
        self.spawn(target, part, flow, Some(answered));
        Ok((first, block, Some(interest)))
    }

    /// A read that claimed blocks opened its streams (and released the claims of the
    /// blocks none brings): the lookups waiting for them look again.
    pub(super) fn claims_settled(&self) {
        self.inner.opened.notify_waiters();
    }

    /// [`Self::join`], once the read that claimed block `index` for this node (cluster
    /// mode) has opened its streams: a lookup that comes while that read still asks the
    /// block owners waits for it (at most [`CLAIM_WAIT`]) rather than fetch the block a
    /// stream is about to bring.
    pub(super) async fn join_claimed(
        &self,
        target: &Target,
        index: BlockIndex,
        patient: bool,
    ) -> Joined {
        let key = target.key(index);
        let deadline = tokio::time::Instant::now() + CLAIM_WAIT;
        loop {
            let opened = self.inner.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let joined = self.join(target, index, patient);
            if !matches!(joined, Joined::Uncovered)
                || self.inner.claims.bringer(&key) != Some(Bringer::Here)
            {
                return joined;
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return joined;
            }
        }
    }

    /// Whether a stream under way brings block `key`.
    pub(super) fn brings(&self, key: &BlockKey) -> bool {
        self.inner
            .blocks
            .lock()
            .get(key)
            .is_some_and(|slot| matches!(slot.state, State::Coming(_)))
    }

    /// What a lookup of block `index` of `target` finds: a stream to wait for, a block one
    /// brought (with it still, or in memory: a lookup that missed the cache just before a
    /// stream put the block there), or none.
    /// A `patient` lookup waits for a block however far ahead of its stream it is (one
    /// another member's owner sends here: that member's reader waits anyway, and a block
    /// fetched alone would come twice), and so is every lookup of a discovery's stream
    /// (the reads that share a discovery began together, at offsets of their own, and one
    /// further on than the stream's lead would otherwise fetch its blocks a second time).
    pub(super) fn join(&self, target: &Target, index: BlockIndex, patient: bool) -> Joined {
        let key = target.key(index);
        let mut blocks = self.inner.blocks.lock();
        let Some(slot) = blocks.get_mut(&key) else {
            drop(blocks);
            let length = usize::try_from(target.layout.block_len(index)).unwrap_or(usize::MAX);
            return match self.inner.cache.memory_block(&key, length) {
                Some(bytes) => Joined::Arrived(bytes),
                None => Joined::Uncovered,
            };
        };
        match &mut slot.state {
            State::Arrived(bytes) => {
                slot.flow.asked_for(index);
                Joined::Arrived(bytes.clone())
            }
            State::Coming(waiting) => {
                slot.flow.asked_for(index);
                let filling = slot.flow.filling.load(Ordering::Acquire);
                if !patient && !slot.flow.discovery && index > filling + WAIT_AHEAD_BLOCKS {
                    self.inner.metrics.streams.count_alone();
                    return Joined::Alone;
                }
                let (sender, delivery) = oneshot::channel();
                waiting.push(sender);
                Joined::Waiting(Waiting {
                    delivery,
                    interest: Interest::new(&slot.flow),
                })
            }
        }
    }

    /// Starts the stream of the blocks `part` of `target`, from a GET of its own or (with
    /// `answered`) from the rest of the discovery's.
    fn spawn(
        &self,
        target: &Target,
        part: RangeInclusive<BlockIndex>,
        flow: Arc<Flow>,
        answered: Option<Answered>,
    ) {
        let this = self.clone();
        let target = target.clone();
        let range = match (
            target.layout.block_range(*part.start()),
            target.layout.block_range(*part.end()),
        ) {
            (Some(first), Some(last)) => ByteRange::new(first.first(), last.last()),
            _ => None,
        };
        let span = tracing::info_span!(target: TRACE_TARGET, "upstream.stream", http.range = range.map(|range| tracing::field::display(range.header_value())));
        let run = async move {
            let end = match (range, answered) {
                (_, Some(answered)) => this.pump(&target, &part, answered, &flow).await,
                (Some(range), None) => this.run(&target, &part, range, &flow).await,
                (None, None) => Err(Undelivered::Stopped),
            };
            this.end(&target, &part, &flow, end);
        };
        drop(self.inner.fill_threads.spawn(run.instrument(span)));
    }

    /// Streams `range` (the blocks `part`) of `target`, handing on each block as it
    /// completes; how it ended.
    async fn run(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        range: ByteRange,
        flow: &Arc<Flow>,
    ) -> Result<(), Undelivered> {
        let inner = &self.inner;
        inner.metrics.streams.count_opened();
        let fill = target.fill_or_default(&inner.fills);
        let slot = tokio::select! {
            slot = inner.fills.acquire(&fill) => slot,
            () = left(flow) => return Err(Undelivered::Stopped),
        };
        let meta = &target.meta;
        let if_match = (!meta.etag.is_empty()).then_some(meta.etag.as_str());
        let object = target.pinned();
        let charge = Charge::new(fill.tenant.clone());
        let open = inner.source.stream(&object, range, if_match, &flow.opened);
        let read = tokio::select! {
            read = charged(charge, open) => read.map_err(refused)?,
            () = left(flow) => return Err(Undelivered::Stopped),
        };
        if read.meta.etag != meta.etag || read.meta.size != meta.size {
            return Err(Undelivered::Refused(UpstreamError::PreconditionFailed {
                request_id: None,
            }));
        }
        if read.first != range.first() || read.length != range.len_bytes() {
            return Err(Undelivered::Stopped);
        }
        flow.settled.arrived();
        let answered = Answered {
            read,
            carry: Bytes::new(),
            _slot: slot,
        };
        self.pump(target, part, answered, flow).await
    }

    /// Reads the blocks `part` of `target` from the answered stream, handing on each
    /// block as it completes; how it ended.
    async fn pump(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        answered: Answered,
        flow: &Arc<Flow>,
    ) -> Result<(), Undelivered> {
        let inner = &self.inner;
        let Answered {
            mut read,
            mut carry,
            _slot,
        } = answered;
        let fill = target.fill_or_default(&inner.fills);
        let charge = Charge::new(fill.tenant.clone());
        for index in part.clone() {
            // Paused while it is far enough ahead of its readers (the origin waits).
            tokio::select! {
                () = flow.within_lead(index) => {}
                () = left(flow) => return Err(Undelivered::Stopped),
            }
            let length = target.layout.block_len(index);
            let next = next_block(&mut read, length, inner.cache.buffers(), &mut carry);
            let block = tokio::select! {
                block = charged(charge.clone(), next) => block?,
                () = left(flow) => return Err(Undelivered::Stopped),
            };
            fill.fetched(block.len());
            if let Err(error) = inner.integrity.admit(target, index, &block, None) {
                return Err(Undelivered::Refused(error));
            }
            let owner = self.owner(target, index);
            if self.arrived(target, index, block.clone(), flow, owner.is_some()) {
                inner.cache.insert_block(target.key(index), block.clone());
            }
            if let Some((peers, owner)) = owner {
                self.hand(target, index, block, peers, owner);
            }
            flow.filling.store(index + 1, Ordering::Release);
            inner.metrics.streams.count_streamed();
            if flow.readers.load(Ordering::Acquire) == 0 {
                return Err(Undelivered::Stopped);
            }
        }
        Ok(())
    }

    fn owner(&self, target: &Target, index: BlockIndex) -> Option<(Arc<dyn Peers>, PeerId)> {
        let peers = self.inner.peers.as_ref()?;
        let owner = peers.owner(&target.object, target.layout.block_size(), index)?;
        Some((peers.clone(), owner))
    }

    /// Hands block `index` of `target` to its owner, in a task of its own, unless
    /// [`HANDS_IN_FLIGHT`] are under way already.
    fn hand(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: Bytes,
        peers: Arc<dyn Peers>,
        owner: PeerId,
    ) {
        // A stream never waits for an owner: one that is slow (or paused) would hold back
        // every reader of the stream. Its block stays here, and the owner, which claimed it
        // for this node, asks this node for it.
        let Ok(permit) = self.inner.hands.clone().try_acquire_owned() else {
            self.inner.metrics.streams.count_hand_skipped();
            return;
        };
        let (target, cache) = (target.clone(), self.inner.cache.clone());
        tokio::spawn(async move {
            let whole = 0..bytes.len() as u64;
            let taken = peers.hand(&owner, target.ask(index, whole), bytes).await;
            if taken && !peers.keep_in_memory() {
                // Its owner has it now, and lookups here go to the owner.
                cache.remove_block(&target.key(index));
            }
            drop(permit);
        });
    }

    /// Block `index` of `target` arrived: to the lookups waiting for it, or else into the
    /// cache (a lookup that waited caches what it gets; `true`: the caller caches it);
    /// into memory only when another
    /// member owns it (`elsewhere`), kept there without
    /// `cluster.keep_peer_blocks_in_memory` only until the owner took it (see
    /// [`Self::hand`]).
    /// Blocks completed before the last [`KEPT_BEHIND`] are no longer found with the
    /// stream.
    fn arrived(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: Bytes,
        flow: &Arc<Flow>,
        elsewhere: bool,
    ) -> bool {
        let key = target.key(index);
        self.inner.claims.release(&key);
        let waiting = {
            let mut blocks = self.inner.blocks.lock();
            if let Some(behind) = index.checked_sub(KEPT_BEHIND) {
                let behind = target.key(behind);
                let ours = blocks.get(&behind).is_some_and(|slot| {
                    Arc::ptr_eq(&slot.flow, flow) && matches!(slot.state, State::Arrived(_))
                });
                if ours {
                    blocks.remove(&behind);
                }
            }
            match blocks.get_mut(&key) {
                Some(slot) => {
                    match std::mem::replace(&mut slot.state, State::Arrived(bytes.clone())) {
                        State::Coming(waiting) => waiting,
                        State::Arrived(_) => Vec::new(),
                    }
                }
                None => Vec::new(),
            }
        };
        let mut taken = false;
        for sender in waiting {
            taken |= sender.send(Ok(bytes.clone())).is_ok();
        }
        // Another member's block is kept in memory even when a lookup took it (the one its
        // owner sends here takes it without caching it), at least until its owner has it.
        if elsewhere {
            self.inner.cache.insert_in_memory(key, bytes);
        }
        !taken && !elsewhere
    }

    /// The stream of `part` ended with `end`: its blocks are no longer found with it, and
    /// the lookups still waiting for one are told.
    fn end(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        flow: &Arc<Flow>,
        end: Result<(), Undelivered>,
    ) {
        let outcome = match &end {
            Ok(()) => StreamEnd::Completed,
            Err(Undelivered::Stopped) if flow.readers.load(Ordering::Acquire) == 0 => {
                StreamEnd::ReadersLeft
            }
            Err(_) => StreamEnd::Failed,
        };
        self.inner.metrics.streams.count_ended(outcome);
        let undelivered = end.err().unwrap_or(Undelivered::Stopped);
        if let Undelivered::Refused(error) = &undelivered {
            let _ = flow.refused.set(error.clone());
        }
        flow.settled.arrived();
        let mut told = Vec::new();
        {
            let mut blocks = self.inner.blocks.lock();
            for index in part.clone() {
                let key = target.key(index);
                self.inner.claims.release_here(&key);
                if blocks
                    .get(&key)
                    .is_some_and(|slot| Arc::ptr_eq(&slot.flow, flow))
                    && let Some(slot) = blocks.remove(&key)
                    && let State::Coming(waiting) = slot.state
                {
                    told.extend(waiting);
                }
            }
        }
        for sender in told {
            let _ = sender.send(Err(undelivered.clone()));
        }
    }
}

/// Notes that `flow` brings the blocks `part` of `target` (those another stream brings
/// already stay with it).
fn bring(
    blocks: &mut HashMap<BlockKey, Slot>,
    target: &Target,
    part: &RangeInclusive<BlockIndex>,
    flow: &Arc<Flow>,
) {
    for index in part.clone() {
        let slot = Slot {
            flow: flow.clone(),
            state: State::Coming(Vec::new()),
        };
        blocks.entry(target.key(index)).or_insert(slot);
    }
}

/// The next `length` bytes of `read`, as one block gathered in one of `buffers`: `carry` first (what the previous
/// block's last chunk held past its end), and what this block's last chunk holds past its
/// own end left in `carry`.
async fn next_block(
    read: &mut StreamedRead,
    length: u64,
    buffers: &BlockBuffers,
    carry: &mut Bytes,
) -> Result<Bytes, Undelivered> {
    let length = usize::try_from(length).map_err(|_| Undelivered::Stopped)?;
    let mut block = buffers.take(length);
    while block.len() < length {
        let mut chunk = if carry.is_empty() {
            match read.next_chunk().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "origin stream broke off; its readers fetch the rest by block");
                    return Err(Undelivered::Stopped);
                }
                None => return Err(Undelivered::Stopped),
            }
        } else {
            std::mem::take(carry)
        };
        let room = length - block.len();
        if chunk.len() > room {
            *carry = chunk.split_off(room);
        }
        block.extend_from_slice(&chunk);
    }
    Ok(block.freeze())
}

/// Returns once no reader holds `flow`.
async fn left(flow: &Flow) {
    loop {
        let notified = flow.left.notified();
        if flow.readers.load(Ordering::Acquire) == 0 {
            return;
        }
        notified.await;
    }
}

/// An error opening a stream: the version's own answer (changed, gone) is every
/// reader's; any other lets each lookup fetch its block alone.
fn refused(error: UpstreamError) -> Undelivered {
    match error {
        UpstreamError::PreconditionFailed { .. } | UpstreamError::NotFound { .. } => {
            Undelivered::Refused(error)
        }
        _ => Undelivered::Stopped,
    }
}

/// `runs`, those apart by at most [`GAP_BRIDGED`] blocks (cached ones, `bridgeable`)
/// joined into one: a read of a partly cached object asks for its holes in a stream
/// rather than one block at a time, before its headers, at the cost of the cached blocks
/// in between.
fn bridged(
    runs: Vec<RangeInclusive<BlockIndex>>,
    bridgeable: impl Fn(&RangeInclusive<BlockIndex>) -> bool,
) -> Vec<RangeInclusive<BlockIndex>> {
    let mut joined: Vec<RangeInclusive<BlockIndex>> = Vec::new();
    for run in runs {
        if let Some(last) = joined.last_mut() {
            let gap = last.end() + 1..=run.start().saturating_sub(1);
            if run.start() - last.end() - 1 <= GAP_BRIDGED && bridgeable(&gap) {
                *last = *last.start()..=*run.end();
                continue;
            }
        }
        joined.push(run);
    }
    joined
}

/// `runs` as at most `streams` streams: each run in at most [`STREAMS_PER_READ`] parts of
/// at least [`BLOCKS_PER_STREAM`] blocks, but a run of the single block `alone`; runs past
/// the streams, and that one, are fetched by block.
fn split(
    runs: &[RangeInclusive<BlockIndex>],
    streams: usize,
    alone: Option<BlockIndex>,
) -> Vec<RangeInclusive<BlockIndex>> {
    let mut parts = Vec::new();
    for run in runs {
        let left = streams.saturating_sub(parts.len());
        let length = run.end() - run.start() + 1;
        if left == 0 {
            break;
        }
        if length == 1 && alone == Some(*run.start()) {
            continue;
        }
        let count = length
            .div_ceil(BLOCKS_PER_STREAM)
            .min(left.min(STREAMS_PER_READ) as u64);
        let each = length.div_ceil(count);
        let mut first = *run.start();
        while first <= *run.end() {
            let last = (first + each - 1).min(*run.end());
            parts.push(first..=last);
            first = last + 1;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: usize = STREAMS_PER_READ;

    #[test]
    fn a_long_run_is_split_in_a_few_parts_of_many_blocks() {
        assert_eq!(
            split(&[0..=255], ALL, Some(0)),
            vec![0..=63, 64..=127, 128..=191, 192..=255]
        );
        assert_eq!(
            split(&[1..=15], ALL, Some(1)),
            vec![1..=4, 5..=8, 9..=12, 13..=15]
        );
        assert_eq!(split(&[3..=8], ALL, Some(3)), vec![3..=5, 6..=8]);
        assert_eq!(split(&[3..=4], ALL, Some(3)), vec![3..=4]);
    }

    #[test]
    fn only_the_read_s_first_block_is_left_to_a_block_fetch_and_the_streams_are_bounded() {
        assert_eq!(split(&[0..=0, 2..=2], ALL, Some(0)), vec![2..=2]);
        assert_eq!(split(&[0..=0], ALL, None), vec![0..=0]);
        assert_eq!(
            split(
                &[0..=1, 3..=3, 5..=6, 8..=9, 11..=12, 14..=15],
                ALL,
                Some(0)
            ),
            vec![0..=1, 3..=3, 5..=6, 8..=9]
        );
        // A lone block after a discovery's: streamed, before the headers.
        assert_eq!(split(&[16..=16], ALL, Some(0)), vec![16..=16]);
        assert_eq!(
            split(&[0..=99, 200..=201], ALL, Some(0)),
            vec![0..=24, 25..=49, 50..=74, 75..=99]
        );
    }

    #[test]
    fn holes_one_cached_block_apart_are_asked_for_in_one_run() {
        let every = |_: &RangeInclusive<u64>| true;
        assert_eq!(bridged(vec![1..=1, 3..=3, 5..=9], every), vec![1..=9]);
        assert_eq!(bridged(vec![1..=1, 4..=4], every), vec![1..=1, 4..=4]);
        // A block another stream brings is not asked for twice.
        let not_3 = |gap: &RangeInclusive<u64>| !gap.contains(&3);
        assert_eq!(
            bridged(vec![1..=2, 4..=5, 7..=7], not_3),
            vec![1..=2, 4..=7]
        );
    }

    #[test]
    fn with_few_fill_slots_free_a_read_opens_fewer_longer_streams() {
        assert_eq!(split(&[0..=255], 1, Some(0)), vec![0..=255]);
        assert_eq!(split(&[0..=255], 2, Some(0)), vec![0..=127, 128..=255]);
        assert_eq!(split(&[0..=9, 20..=29], 1, Some(0)), vec![0..=9]);
    }
}
