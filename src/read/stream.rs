//! Origin streams ([`Streams`]): a read's uncached blocks asked of the origin in a few GETs
//! started at once, each covering many blocks, rather than one GET per block.
//!
//! When a GET starts, the blocks of its range that the cache does not hold (nor a stream
//! already brings, nor a lookup is fetching from one) form runs of consecutive blocks (two runs
//! [`GAP_BRIDGED`] cached block apart are one); each run but the read's first block alone
//! is asked for in ranged GETs of at least [`BLOCKS_PER_STREAM`] blocks, at most
//! [`STREAMS_PER_READ`] and no more than the fill slots free, pinned to the version the
//! read announced (`If-Match`, and the version id when the bucket has one). A stream cuts its bytes into blocks as they arrive; each whole
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

mod join;
mod plan;
mod run;

pub(super) use join::Joined;
use plan::{bridged, split};
use run::{bring, next_block};

use super::Target;
use super::claims::Claims;
use super::fills::{FillSlot, FillSlots};
use super::integrity::Integrity;
use crate::cache::{BlockCache, BlockKey, Fetch};
use crate::fill_threads::FillThreads;
use crate::source::{BlockSource, Peers, ResponseHead, StreamedRead, UpstreamError};
use crate::telemetry::Metrics;
use crate::types::BlockIndex;

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
    /// A lookup here is fetching it from a stream (the read's lookup joins that fetch): no
    /// stream asks for it, not even to bridge a gap.
    Fetching,
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
    /// `has` says the read has (cached, or discovered with the metadata), a lookup is
    /// fetching from a stream, or another member holds or brings, and joins the streams under way that
    /// bring some of them. The read
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
                if flow.is_some() || matches!(has, Has::Elsewhere | Has::Fetching) {
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
            // alone (hedged; the read waits for it before its headers anyway), unless a
            // lookup asks for it alone already because its stream stopped before it: the
            // read's lookup would join that fetch, however long the origin holds it. A
            // single block further on is streamed, so that its answer too comes before the
            // headers (one left after the discovery's blocks, or between cached ones).
            // In cluster mode a read opens as many streams as fill slots are free: the
            // blocks the owners claimed for this node are scattered among those other
            // members hold, and the lookups the owners send here join the streams.
            let (most, alone) = match self.inner.peers {
                Some(_) => (usize::MAX, None),
                None => {
                    let fetch = self.inner.cache.fetch_under_way(&target.key(first));
                    let fell_back = fetch == Some(Fetch::FellBack);
                    (STREAMS_PER_READ, (!fell_back).then_some(first))
                }
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
}
