//! Sequential detection across requests: each object version a client reads has a
//! stream that remembers where the last read ended. A read starting near there (at most
//! [`SLACK_BYTES`] back or forward) continues the stream; from the second continuation on,
//! each one doubles the prefetch window, from 1 block up to `max_window_blocks`. Any
//! other read resets the stream, so random access — which lands near the previous read
//! now and then, but not twice in a row — prefetches nothing. The blocks to prefetch are the ones after the read's last block,
//! each issued once per stream. Once the window is grown, a read issues blocks only when
//! at least a batch of them fits in the window (one origin stream's worth, see
//! [`Detector::new`]), so a steady reader's prefetches come in streams of several blocks
//! rather than one GET per block it passes.
//!
//! Accounting: blocks issued and not read by the time their stream has been idle for
//! [`STREAM_IDLE`] count as wasted; issued blocks a later read covers count as used.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::block::Blocks;
use super::fills::FillClass;
use super::{PrefetchLimits, Target};
use crate::budget::MemoryBudget;
use crate::shutdown::Shutdown;
use crate::telemetry::ErrorChain;
use crate::telemetry::{Metrics, PrefetchOutcome};
use crate::types::{BlockIndex, BlockLayout, ByteRange, ObjectRef};

/// How far a read may start before or after where the previous one ended and still
/// continue the stream (at most one block).
pub const SLACK_BYTES: u64 = 256 * 1024;
/// A stream not read for this long is forgotten.
pub const STREAM_IDLE: Duration = Duration::from_secs(30);
/// Streams tracked at most; beyond this, new objects are not tracked until old ones expire.
const MAX_STREAMS: usize = 16_384;

/// One object version as a client reads it.
pub type StreamKey = (ObjectRef, Arc<str>);

#[derive(Debug)]
struct Stream {
    next_offset: u64,
    /// Consecutive reads that continued the stream.
    run: u32,
    window: u64,
    /// Blocks below this were issued already (or read on demand).
    issued_until: BlockIndex,
    /// Issued blocks no read has covered yet.
    pending: BTreeSet<BlockIndex>,
    last_seen: Instant,
}

/// What one observed read means for prefetching.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Blocks to fetch ahead now.
    pub prefetch: Range<BlockIndex>,
    /// Prefetched blocks this read covered.
    pub used: u64,
    /// Prefetched blocks of expired streams that were never read.
    pub wasted: u64,
}

#[derive(Debug)]
struct Streams {
    by_key: HashMap<StreamKey, Stream>,
    /// When expired streams were last swept out.
    swept: Instant,
}

impl Streams {
    /// Forgets streams idle for [`STREAM_IDLE`]; returns their never-read prefetches.
    fn sweep(&mut self, now: Instant) -> u64 {
        let mut wasted = 0;
        self.by_key.retain(|_, stream| {
            let live = now.duration_since(stream.last_seen) < STREAM_IDLE;
            if !live {
                wasted += stream.pending.len() as u64;
            }
            live
        });
        self.swept = now;
        wasted
    }
}

#[derive(Debug)]
pub struct Detector {
    max_window_blocks: u64,
    /// Blocks a grown window issues at least at once (but at the object's end).
    batch: u64,
    streams: Mutex<Streams>,
}

impl Detector {
    /// A detector of windows up to `max_window_blocks` that, once a window is grown,
    /// issues it in batches of at least `batch` blocks (clamped to half the window, and
    /// to at least 1).
    pub fn new(max_window_blocks: u64, batch: u64) -> Self {
        Self {
            max_window_blocks,
            batch: batch.min(max_window_blocks / 2).max(1),
            streams: Mutex::new(Streams {
                by_key: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// Records a read of `bytes` from an object cut as `layout`; at most `budget` blocks
    /// (the prefetch slots free now) are issued, and the rest of the window is issued by
    /// later reads of the stream.
    pub fn observe(
        &self,
        key: StreamKey,
        layout: BlockLayout,
        bytes: ByteRange,
        budget: u64,
    ) -> Observation {
        let now = Instant::now();
        let mut observation = Observation::default();
        let mut streams = self.streams.lock();
        let full = streams.by_key.len() >= MAX_STREAMS && !streams.by_key.contains_key(&key);
        if full || now.duration_since(streams.swept) >= STREAM_IDLE {
            observation.wasted += streams.sweep(now);
            if streams.by_key.len() >= MAX_STREAMS {
                return observation;
            }
        }
        let block_size = layout.block_size();
        let read_blocks = layout.blocks_for(bytes);
        let stream = streams.by_key.entry(key).or_insert_with(|| Stream {
            next_offset: u64::MAX,
            run: 0,
            window: 0,
            issued_until: 0,
            pending: BTreeSet::new(),
            last_seen: now,
        });
        if now.duration_since(stream.last_seen) >= STREAM_IDLE {
            observation.wasted += stream.pending.len() as u64;
            stream.pending.clear();
            stream.next_offset = u64::MAX;
        }
        let slack = SLACK_BYTES.min(block_size);
        let continues = stream.next_offset != u64::MAX
            && bytes.first().saturating_add(slack) >= stream.next_offset
            && bytes.first() <= stream.next_offset.saturating_add(slack);
        stream.run = if continues { stream.run + 1 } else { 0 };
        stream.window = if stream.run >= 2 {
            (stream.window * 2).clamp(1, self.max_window_blocks)
        } else {
            0
        };
        stream.next_offset = bytes.last() + 1;
        stream.last_seen = now;
        for index in read_blocks.clone() {
            if stream.pending.remove(&index) {
                observation.used += 1;
            }
        }
        if stream.window == 0 {
            return observation;
        }
        let next = read_blocks.end() + 1;
        let start = next.max(stream.issued_until);
        let end = next
            .saturating_add(stream.window)
            .min(layout.block_count())
            .min(start.saturating_add(budget));
        // A grown window issues a batch at a time (a block per read would be an origin GET
        // per block): less waits for a later read, while a batch is still issued ahead.
        let grown = stream.window >= self.max_window_blocks;
        let short = end.saturating_sub(start) < self.batch && end < layout.block_count();
        if grown && short && start.saturating_sub(next) >= self.batch {
            return observation;
        }
        if start < end {
            stream.issued_until = end;
            stream.pending.extend(start..end);
            observation.prefetch = start..end;
        }
        observation
    }

    /// Takes back the blocks `withdrawn` of the stream `key` that the last observation
    /// issued but that found no room: they are not pending (a read that covers them did
    /// not use a prefetch), and, unless a later read issued past them meanwhile, the
    /// stream's next reads issue them again.
    pub fn withdraw(&self, key: &StreamKey, withdrawn: Range<BlockIndex>) {
        let mut streams = self.streams.lock();
        let Some(stream) = streams.by_key.get_mut(key) else {
            return;
        };
        for index in withdrawn.clone() {
            stream.pending.remove(&index);
        }
        if stream.issued_until == withdrawn.end {
            stream.issued_until = withdrawn.start;
        }
    }

    /// Forgets expired streams; returns how many prefetched blocks they never read.
    #[cfg(test)]
    pub fn expire(&self) -> u64 {
        self.streams.lock().sweep(Instant::now())
    }
}

/// Prefetch across requests: sequential detection over the blocks, within a fixed number
/// of origin requests and of blocks in flight. Cheap to clone.
#[derive(Clone)]
pub(super) struct Prefetcher {
    inner: Arc<Inner>,
}

struct Inner {
    detector: Detector,
    /// Prefetch origin requests in flight at most: a stream or a lone block's fetch.
    fetches: Arc<Semaphore>,
    /// Prefetched blocks in flight at most (not cached yet).
    slots: Arc<Semaphore>,
    /// Blocks counted as one origin request: a stream's worth on one node, 1 in a fleet
    /// (`Blocks::prefetch_batch`; the detector issues at least that many at once).
    per_fetch: u64,
    blocks: Blocks,
    budget: MemoryBudget,
    metrics: Arc<Metrics>,
    /// Prefetches in flight stop when it fires.
    shutdown: Shutdown,
}

impl Prefetcher {
    /// A prefetcher of windows up to `window_blocks`, within `limits`, through `blocks`;
    /// `None` when `window_blocks` is 0 (prefetch is off).
    pub(super) fn new(
        window_blocks: u64,
        limits: PrefetchLimits,
        blocks: Blocks,
        budget: MemoryBudget,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> Option<Self> {
        let batch = blocks.prefetch_batch();
        (window_blocks > 0).then(|| Self {
            inner: Arc::new(Inner {
                detector: Detector::new(window_blocks, batch),
                fetches: Arc::new(Semaphore::new(limits.fetches.max(1))),
                slots: Arc::new(Semaphore::new(limits.blocks.max(1))),
                per_fetch: batch,
                blocks,
                budget,
                metrics,
                shutdown,
            }),
        })
    }

    /// Records the read of `bytes` for sequential detection and starts the prefetches it
    /// calls for. Prefetches go through the cache like demand reads, so a demand read of
    /// the same block joins the prefetch instead of fetching again; when the budget is
    /// spent, a prefetch is skipped rather than queued, so demand never waits behind it.
    pub(super) fn after(&self, target: &Target, bytes: ByteRange) {
        let Inner {
            detector,
            fetches,
            slots,
            per_fetch,
            budget,
            metrics,
            ..
        } = &*self.inner;
        let key = (target.object.clone(), target.version.clone());
        let requests = fetches.available_permits() as u64;
        let free = (slots.available_permits() as u64).min(requests.saturating_mul(*per_fetch));
        let observation = detector.observe(key.clone(), target.layout, bytes, free);
        metrics.count_prefetch(PrefetchOutcome::Used, observation.used);
        metrics.count_prefetch(PrefetchOutcome::Wasted, observation.wasted);
        // The origin requests the blocks take: a stream per batch, or one per block.
        let wanted = (observation.prefetch.end - observation.prefetch.start).div_ceil(*per_fetch);
        let fetch = match u32::try_from(wanted) {
            Ok(0) | Err(_) => None,
            Ok(wanted) => fetches.clone().try_acquire_many_owned(wanted).ok(),
        };
        // The blocks issued are the first ones that find room; from the first that finds
        // none on, they go back to the detector, to be issued by a later read.
        let mut issued = Vec::new();
        let mut taken_back = observation.prefetch;
        while fetch.is_some() && !taken_back.is_empty() {
            let index = taken_back.start;
            let room = budget.try_reserve(target.layout.block_len(index));
            let (Some(charge), Ok(slot)) = (room, slots.clone().try_acquire_owned()) else {
                break;
            };
            metrics.count_prefetch(PrefetchOutcome::Issued, 1);
            issued.push((index, slot, charge));
            taken_back.start += 1;
        }
        if !taken_back.is_empty() {
            metrics.count_prefetch(PrefetchOutcome::Skipped, taken_back.end - taken_back.start);
            detector.withdraw(&key, taken_back);
        }
        let target = target.of_class(FillClass::Prefetch);
        // The blocks issued together come in origin streams, held until each is cached
        // (in cluster mode each comes from its owner, as a block fetch: docs/cluster.md,
        // "Cold reads in a fleet").
        let streams = match (issued.first(), issued.last()) {
            (Some((first, ..)), Some((last, ..))) => {
                self.inner.blocks.prefetch_streams(&target, *first..=*last)
            }
            _ => Vec::new(),
        };
        // The streams and the origin requests' permits, until the last block is cached.
        let held = Arc::new((streams, fetch));
        for (index, slot, charge) in issued {
            let this = self.inner.clone();
            let (target, held) = (target.clone(), held.clone());
            tokio::spawn(async move {
                let fetched = this.shutdown.run(this.blocks.ensure_block(&target, index));
                if let Some(Err(error)) = fetched.await {
                    let object = &target.object;
                    tracing::debug!(%object, index, error = %ErrorChain(&error), "prefetch failed");
                }
                // Once cached, the block is the cache's to account for.
                drop((slot, charge, held));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn key() -> StreamKey {
        (ObjectRef::new("bucket", "key").unwrap(), Arc::from("etag"))
    }

    fn layout() -> BlockLayout {
        BlockLayout::new(4 * MIB, 400 * MIB)
    }

    fn read(detector: &Detector, first: u64, length: u64) -> Observation {
        detector.observe(
            key(),
            layout(),
            ByteRange::new(first, first + length - 1).unwrap(),
            u64::MAX,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_ranges_grow_the_window_up_to_the_maximum() {
        let detector = Detector::new(8, 1);
        let first = read(&detector, 0, MIB).prefetch;
        assert_eq!(first, 0..0, "a first read is no pattern");
        let second = read(&detector, MIB, MIB).prefetch;
        assert_eq!(second, 0..0, "nor is one continuation");
        assert_eq!(read(&detector, 2 * MIB, MIB).prefetch, 1..2, "window 1");
        let third = read(&detector, 3 * MIB, MIB).prefetch;
        assert_eq!(third, 2..3, "window 2 from block 1");
        let observation = read(&detector, 4 * MIB, 4 * MIB);
        assert_eq!(observation.prefetch, 3..6, "window 4 after block 1");
        assert_eq!(observation.used, 1, "block 1 was prefetched");
        assert_eq!(
            read(&detector, 8 * MIB, 4 * MIB).prefetch,
            6..11,
            "window 8"
        );
        assert_eq!(
            read(&detector, 12 * MIB, 4 * MIB).prefetch,
            11..12,
            "stays 8"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_grown_window_is_issued_in_batches_that_stay_ahead_of_the_reader() {
        let detector = Detector::new(16, 4);
        let mut issued: Vec<Range<BlockIndex>> = Vec::new();
        let mut ahead = BTreeSet::new();
        for offset in 0..400 {
            let observation = read(&detector, offset * MIB, MIB);
            let block = offset / 4;
            if block >= 4 {
                assert!(
                    ahead.contains(&block),
                    "block {block} was issued before its first read"
                );
            }
            if !observation.prefetch.is_empty() {
                ahead.extend(observation.prefetch.clone());
                issued.push(observation.prefetch);
            }
        }
        let grown = issued.iter().position(|range| range.end - range.start >= 8);
        let after = &issued[grown.expect("the window grows") + 1..];
        assert!(after.len() > 10, "{issued:?}");
        for range in after {
            let reaches_the_end = range.end == 100;
            assert!(
                range.end - range.start >= 4 || reaches_the_end,
                "a batch of at least 4 blocks: {issued:?}"
            );
        }
        let total: u64 = issued.iter().map(|range| range.end - range.start).sum();
        assert_eq!(total, ahead.len() as u64, "each block issued once");
        assert_eq!(ahead.last(), Some(&99), "up to the last block");
    }

    #[tokio::test(start_paused = true)]
    async fn few_free_slots_wait_for_a_batch_while_a_batch_is_still_ahead() {
        let detector = Detector::new(4, 2);
        let observe = |block: u64, budget: u64| {
            let bytes = ByteRange::new(block * 4 * MIB, (block + 1) * 4 * MIB - 1).unwrap();
            detector.observe(key(), layout(), bytes, budget).prefetch
        };
        observe(0, 8);
        observe(1, 8);
        assert_eq!(observe(2, 8), 3..4, "window 1");
        assert_eq!(observe(3, 8), 4..6, "window 2");
        assert_eq!(observe(4, 8), 6..9, "window 4: grown");
        assert!(observe(5, 1).is_empty(), "one slot, 3 blocks ahead: waits");
        assert_eq!(observe(6, 8), 9..11, "a batch fits");
        assert!(observe(7, 1).is_empty(), "one slot, 3 blocks ahead: waits");
        assert!(observe(8, 1).is_empty(), "one slot, 2 blocks ahead: waits");
        assert_eq!(observe(9, 1), 11..12, "one slot, 1 block ahead: issued");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_at_most_half_the_window_and_at_least_one_block() {
        assert_eq!(Detector::new(16, 4).batch, 4);
        assert_eq!(Detector::new(4, 4).batch, 2);
        assert_eq!(Detector::new(1, 4).batch, 1);
        assert_eq!(Detector::new(16, 0).batch, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_taken_back_are_not_counted_used_and_are_issued_again() {
        let detector = Detector::new(4, 1);
        for offset in 0..3 {
            read(&detector, offset * 4 * MIB, 4 * MIB);
        }
        assert_eq!(
            read(&detector, 12 * MIB, 4 * MIB).prefetch,
            4..6,
            "window 2"
        );
        detector.withdraw(&key(), 5..6);
        let next = read(&detector, 16 * MIB, 4 * MIB);
        assert_eq!(
            next.prefetch,
            5..9,
            "block 5 issued again, with the window of 4"
        );
        assert_eq!(next.used, 1, "block 4 was prefetched");
        detector.withdraw(&key(), 5..9);
        let after = read(&detector, 20 * MIB, 4 * MIB);
        assert_eq!(after.used, 0, "block 5 found no room: not a prefetch used");
        assert_eq!(after.prefetch, 6..10, "the blocks taken back, issued again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_wider_than_the_budget_is_issued_by_later_reads() {
        let detector = Detector::new(8, 1);
        let observe = |first: u64, budget: u64| {
            detector
                .observe(
                    key(),
                    layout(),
                    ByteRange::new(first, first + 4 * MIB - 1).unwrap(),
                    budget,
                )
                .prefetch
        };
        observe(0, 8);
        observe(4 * MIB, 8);
        assert_eq!(observe(8 * MIB, 8), 3..4, "window 1");
        assert_eq!(observe(12 * MIB, 8), 4..6, "window 2");
        assert_eq!(observe(16 * MIB, 1), 6..7, "window 4, one slot free");
        assert!(observe(20 * MIB, 0).is_empty(), "window 8, no slot free");
        assert_eq!(
            observe(24 * MIB, 8),
            7..15,
            "the window issued once slots free up, from where issuing stopped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn small_skips_and_back_steps_keep_the_pattern_and_jumps_reset_it() {
        let detector = Detector::new(16, 1);
        read(&detector, 0, MIB);
        read(&detector, MIB, MIB);
        let skip = 128 * 1024;
        let skipped = read(&detector, 2 * MIB + skip, MIB).prefetch;
        assert!(!skipped.is_empty(), "a small skip");
        let stepped_back = read(&detector, 3 * MIB, MIB).prefetch;
        assert!(!stepped_back.is_empty(), "a small step back");
        assert!(
            read(&detector, 200 * MIB, MIB).prefetch.is_empty(),
            "a jump resets"
        );
        let once = read(&detector, 201 * MIB, MIB).prefetch;
        assert!(once.is_empty(), "one continuation is not yet a pattern");
        let twice = read(&detector, 202 * MIB, MIB).prefetch;
        assert!(!twice.is_empty(), "two start anew");
    }

    #[tokio::test(start_paused = true)]
    async fn random_reads_prefetch_nothing() {
        let detector = Detector::new(16, 1);
        let mut offset = 7 * MIB;
        for _ in 0..200 {
            offset = (offset * 48_271 + 13 * MIB) % (390 * MIB);
            assert!(
                read(&detector, offset, 64 * 1024).prefetch.is_empty(),
                "{offset}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unread_prefetches_of_an_idle_stream_count_as_wasted() {
        let detector = Detector::new(4, 1);
        for offset in 0..4 {
            read(&detector, offset * MIB, MIB);
        }
        assert_eq!(detector.expire(), 0, "the stream is live");
        tokio::time::advance(STREAM_IDLE).await;
        assert_eq!(detector.expire(), 2, "blocks 1 and 2 were never read");
        assert_eq!(read(&detector, 3 * MIB, MIB).prefetch, 0..0, "a new stream");
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_never_passes_the_last_block() {
        let detector = Detector::new(64, 1);
        let mut offset = 380 * MIB;
        let mut issued = Vec::new();
        while offset < 400 * MIB {
            issued.extend(read(&detector, offset, MIB).prefetch);
            offset += MIB;
        }
        assert!(issued.iter().all(|&index| index < 100), "{issued:?}");
        let unique: BTreeSet<_> = issued.iter().collect();
        assert_eq!(unique.len(), issued.len(), "each block issued once");
    }
}
