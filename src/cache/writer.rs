//! The disk write queue: block pieces on their way to the disk tier, handed to foyer at
//! the pace its writer empties its buffer.
//!
//! foyer's block engine drops, without telling the caller, an entry that arrives while its
//! write buffer is full and a write is in flight, and one that arrives while its submit
//! queue is over its threshold. A burst of fetched blocks faster than one write lost
//! pieces that way, and a dataset read twice came partly from the origin the second
//! time. So:
//!
//! Invariants:
//! - Pieces wait here, in a queue bounded in bytes ([`super::DiskLayout::submit_queue_bytes`]);
//!   they are slices of fetched blocks, not copies.
//! - One task hands them to foyer in batches of at most a third of foyer's write buffer,
//!   with at most two batches outstanding (one being written, one filling the buffer),
//!   so foyer never drops one: a batch's bytes leave the queue's count when foyer says
//!   the write that holds it is done.
//! - A fetched block that finds the queue full waits for room, in arrival order (room is
//!   a fair semaphore of bytes, so no fill starves), for as long as writes keep finishing:
//!   when the disk writes slower than the origin delivers, cache fills slow down to the
//!   disk's pace rather than drop what they fetched (each dropped block would cost another
//!   origin GET once memory evicts it). Only a disk that finishes no write for
//!   [`FILL_WAIT`] (it has stalled) makes a block skip the disk, counted in
//!   `portico_cache_disk_skipped_blocks_total`. The writer keeps the last
//!   [`SKIPPED_KEPT`] blocks that skipped, with their bytes while those fit in as many
//!   bytes again as the queue holds, and once a write finishes again (the disk has room)
//!   it writes each of them ahead of the queue (`portico_cache_disk_retried_blocks_total`):
//!   from the bytes it kept, else from memory. A skipped block whose bytes were not kept
//!   and that memory has evicted by then is lost to the disk, and counted
//!   (`portico_cache_disk_lost_blocks_total`). One memory serves before its retry is
//!   queued again as well (readmission). Blocks queued again never wait.
//! - A block is queued once: a block already waiting is not queued again, and removing
//!   a block drops it from the queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use foyer::{HybridCache, HybridCacheProperties, Location};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::{BlockKey, CacheKey, CacheValue};
use crate::telemetry::Metrics;

/// Longest wait for queued writes when the cache closes.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// How long the disk may finish no write before a fetched block waiting for room in the
/// queue skips it. The queue drains a batch per disk write (milliseconds), so only a disk
/// that has stopped makes fills wait this long.
pub(super) const FILL_WAIT: Duration = Duration::from_secs(2);

/// Blocks that skipped the disk kept for a retry, at most; older ones are forgotten
/// (counted as lost).
const SKIPPED_KEPT: usize = 1024;

/// A block's pieces waiting for the disk.
pub(super) type Pieces = Vec<(CacheKey, Bytes)>;

/// What [`WriteQueue::push`] did with a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pushed {
    Queued,
    /// The block was already waiting.
    AlreadyQueued,
    /// The queue was full; the block skipped the disk.
    Full,
}

#[derive(Default)]
struct Pending {
    order: VecDeque<BlockKey>,
    blocks: HashMap<BlockKey, Pieces>,
    /// Bytes waiting here and handed to foyer but not yet written.
    bytes: usize,
    /// Blocks that skipped the disk, oldest first, to be written once it has room: with
    /// their pieces while those fit in `kept_limit` bytes, else by key alone.
    skipped: VecDeque<(BlockKey, Option<Pieces>)>,
    /// Bytes of the pieces kept in `skipped`.
    kept: usize,
    /// Retried blocks handed to foyer and not yet written (outside the queue's room).
    retrying: usize,
}

impl Pending {
    /// Nothing is queued, being written or waiting for a retry.
    fn settled(&self) -> bool {
        self.bytes == 0 && self.retrying == 0 && self.skipped.is_empty()
    }
}

pub(super) struct WriteQueue {
    pending: Mutex<Pending>,
    /// Wakes the writer when a block is queued.
    queued: Notify,
    /// Wakes [`WriteQueue::drained`] when the queue's bytes reach 0.
    empty: Notify,
    /// The queue's free room, in bytes: fills take it in arrival order.
    room: Semaphore,
    /// Set when the cache closes: the writer ends once the queue is empty.
    closed: AtomicBool,
    /// When bytes last left the queue (a write finished, or blocks were dropped).
    progress: Mutex<Instant>,
    batch: usize,
    /// Most bytes of skipped blocks kept for their retry: as many as the queue holds.
    kept_limit: usize,
    metrics: Arc<Metrics>,
}

impl WriteQueue {
    /// A queue of at most `capacity` bytes, fed to a foyer writer whose buffer holds
    /// `buffer` bytes.
    pub(super) fn new(capacity: usize, buffer: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            queued: Notify::new(),
            empty: Notify::new(),
            room: Semaphore::new(capacity.min(Semaphore::MAX_PERMITS)),
            closed: AtomicBool::new(false),
            progress: Mutex::new(Instant::now()),
            batch: (buffer / 3).max(1),
            kept_limit: capacity,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic while holding the lock leaves the queue's data consistent (each
        // change is one step), so a poisoned lock is used as it is.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `pieces` of `block` for the disk, or skips them when the queue is full.
    pub(super) fn push(&self, block: &BlockKey, pieces: Pieces) -> Pushed {
        if self.holds(block) {
            return Pushed::AlreadyQueued;
        }
        match self.room.try_acquire_many(room_bytes(&pieces)) {
            Ok(room) => {
                room.forget();
                self.enqueue(block, pieces)
            }
            Err(_) => {
                self.skip(block, pieces);
                Pushed::Full
            }
        }
    }

    /// Counts `block` as skipped and keeps it for a retry: its `pieces` too while they fit
    /// in [`Self::kept_limit`] (none given: the key alone).
    pub(super) fn skip(&self, block: &BlockKey, pieces: Pieces) {
        self.metrics.disk_skipped_blocks.inc();
        let bytes = pieces_bytes(&pieces);
        let mut pending = self.lock();
        if pending.skipped.len() == SKIPPED_KEPT
            && let Some((_, forgotten)) = pending.skipped.pop_front()
        {
            self.metrics.disk_lost_blocks.inc();
            pending.kept -= forgotten.as_ref().map_or(0, pieces_bytes);
        }
        let kept =
            (!pieces.is_empty() && pending.kept + bytes <= self.kept_limit).then_some(pieces);
        pending.kept += kept.as_ref().map_or(0, |_| bytes);
        pending.skipped.push_back((block.clone(), kept));
        drop(pending);
        // A writer with nothing queued sleeps until something is.
        self.queued.notify_one();
    }

    /// Queues `pieces` of `block` for the disk, waiting for room for as long as the disk
    /// keeps writing: it skips them only once no write has finished for `stall`.
    pub(super) async fn push_waiting(
        &self,
        block: &BlockKey,
        pieces: Pieces,
        stall: Duration,
    ) -> Pushed {
        if self.holds(block) {
            return Pushed::AlreadyQueued;
        }
        let waiting_since = Instant::now();
        tokio::select! {
            // The semaphore is never closed, so this always gets room.
            room = self.room.acquire_many(room_bytes(&pieces)) => if let Ok(room) = room {
                room.forget();
                return self.enqueue(block, pieces);
            },
            () = self.stalled(waiting_since, stall) => {}
        }
        self.skip(block, pieces);
        Pushed::Full
    }

    /// Resolves once no write has finished for `stall`, counting from `since` at the
    /// earliest.
    async fn stalled(&self, since: Instant, stall: Duration) {
        loop {
            let last = (*self.lock_progress()).max(since);
            if last.elapsed() >= stall {
                return;
            }
            tokio::time::sleep_until(last + stall).await;
        }
    }

    fn lock_progress(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `pieces` of `block`, whose room has been taken.
    fn enqueue(&self, block: &BlockKey, pieces: Pieces) -> Pushed {
        let bytes = pieces_bytes(&pieces);
        {
            let mut pending = self.lock();
            if pending.blocks.contains_key(block) {
                // Queued by another fill meanwhile.
                self.room.add_permits(bytes);
                return Pushed::AlreadyQueued;
            }
            pending.bytes += bytes;
            pending.order.push_back(block.clone());
            pending.blocks.insert(block.clone(), pieces);
            self.metrics.disk_queue_bytes.set(gauge(pending.bytes));
        }
        self.queued.notify_one();
        Pushed::Queued
    }

    /// Whether `block` is waiting for the disk.
    pub(super) fn holds(&self, block: &BlockKey) -> bool {
        self.lock().blocks.contains_key(block)
    }

    /// Drops `block` from the queue, if it waits there.
    pub(super) fn remove(&self, block: &BlockKey) {
        let mut pending = self.lock();
        let mut dropped = 0;
        pending.skipped.retain(|(skipped, kept)| {
            let keep = skipped != block;
            if !keep {
                dropped += kept.as_ref().map_or(0, pieces_bytes);
            }
            keep
        });
        pending.kept -= dropped;
        if let Some(pieces) = pending.blocks.remove(block) {
            pending.order.retain(|queued| queued != block);
            self.release(&mut pending, pieces_bytes(&pieces));
        }
    }

    /// Drops everything queued (the disk tier was turned off).
    fn clear(&self) {
        let mut pending = self.lock();
        let bytes = pending.blocks.values().map(pieces_bytes).sum();
        pending.order.clear();
        pending.blocks.clear();
        pending.skipped.clear();
        pending.kept = 0;
        self.release(&mut pending, bytes);
    }

    fn release(&self, pending: &mut Pending, bytes: usize) {
        *self.lock_progress() = Instant::now();
        pending.bytes = pending.bytes.saturating_sub(bytes);
        self.metrics.disk_queue_bytes.set(gauge(pending.bytes));
        self.room.add_permits(bytes);
        self.notify_if_settled(pending);
    }

    /// Wakes [`Self::drained`] when nothing is queued, retried or waiting for a retry.
    fn notify_if_settled(&self, pending: &Pending) {
        if pending.settled() {
            self.empty.notify_waiters();
        }
    }

    /// Takes whole blocks in queue order, up to a batch (at least one block).
    fn take_batch(&self) -> (Pieces, usize) {
        let mut pending = self.lock();
        let mut batch = Vec::new();
        let mut bytes = 0;
        while bytes < self.batch {
            let Some(block) = pending.order.pop_front() else {
                break;
            };
            if let Some(pieces) = pending.blocks.remove(&block) {
                bytes += pieces_bytes(&pieces);
                batch.extend(pieces);
            }
        }
        (batch, bytes)
    }

    /// Takes blocks that skipped the disk, oldest first, up to a batch: `retry` gives the
    /// pieces of each that the disk lacks, from those kept (if any) or from memory. Their
    /// bytes count as retrying, outside the queue's room.
    fn take_retries(&self, retry: &impl Fn(&BlockKey, Option<Pieces>) -> Retry) -> (Pieces, usize) {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while bytes < self.batch {
            let Some((block, kept)) = ({
                let mut pending = self.lock();
                let next = pending.skipped.pop_front();
                if let Some((_, Some(pieces))) = &next {
                    pending.kept -= pieces_bytes(pieces);
                }
                next
            }) else {
                break;
            };
            // `retry` looks at the queue itself: the lock is not held here.
            match retry(&block, kept) {
                Retry::Write(pieces) => {
                    bytes += pieces_bytes(&pieces);
                    batch.extend(pieces);
                    self.metrics.disk_retried_blocks.inc();
                }
                Retry::Needless => {}
                Retry::Lost => {
                    self.metrics.disk_lost_blocks.inc();
                }
            }
        }
        let mut pending = self.lock();
        pending.retrying += bytes;
        self.notify_if_settled(&pending);
        (batch, bytes)
    }

    /// Hands queued pieces to `hybrid`'s disk tier, batch by batch, while `writing()`
    /// says the disk tier is on; each batch starts with blocks that skipped the disk and
    /// that `retry` finds in memory. Runs for as long as the cache is open.
    pub(super) async fn run(
        self: Arc<Self>,
        hybrid: HybridCache<CacheKey, CacheValue>,
        writing: impl Fn() -> bool,
        retry: impl Fn(&BlockKey, Option<Pieces>) -> Retry,
    ) {
        let mut outstanding: VecDeque<Write> = VecDeque::new();
        loop {
            let queued = self.queued.notified();
            let (mut pieces, retried) = self.take_retries(&retry);
            let (batch, bytes) = self.take_batch();
            pieces.extend(batch);
            let write = Write {
                bytes,
                retried,
                done: None,
            };
            if pieces.is_empty() {
                // Nothing new: let the writes in flight finish, then sleep.
                while let Some(write) = outstanding.pop_front() {
                    self.finish(write).await;
                }
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                queued.await;
                continue;
            }
            if !writing() {
                drop(pieces);
                self.finish(write).await;
                self.clear();
                continue;
            }
            let started = Instant::now();
            for (key, piece) in pieces {
                hybrid.insert_with_properties(
                    key,
                    CacheValue::Block(piece),
                    HybridCacheProperties::default().with_location(Location::OnDisk),
                );
            }
            let storage = hybrid.clone();
            let metrics = self.metrics.clone();
            outstanding.push_back(Write {
                done: Some(tokio::spawn(async move {
                    storage.storage().wait().await;
                    metrics
                        .disk_write_duration
                        .observe(started.elapsed().as_secs_f64());
                })),
                ..write
            });
            while outstanding.len() >= 2 {
                if let Some(write) = outstanding.pop_front() {
                    self.finish(write).await;
                }
            }
        }
    }

    /// Waits for `write` to be on disk and gives its bytes back.
    async fn finish(&self, write: Write) {
        if let Some(done) = write.done {
            let _ = done.await;
        }
        let mut pending = self.lock();
        pending.retrying = pending.retrying.saturating_sub(write.retried);
        self.release(&mut pending, write.bytes);
    }

    /// Waits for what is queued (see [`Self::drained`]), then ends the writer.
    pub(super) async fn close(&self) {
        self.drained().await;
        self.closed.store(true, Ordering::Release);
        self.queued.notify_one();
    }

    /// Waits (up to [`CLOSE_WAIT`]) until everything queued has been written, and every
    /// block that skipped the disk has been retried.
    pub(super) async fn drained(&self) {
        let wait = async {
            loop {
                let empty = self.empty.notified();
                if self.lock().settled() {
                    return;
                }
                empty.await;
            }
        };
        if tokio::time::timeout(CLOSE_WAIT, wait).await.is_err() {
            tracing::warn!("closing with block pieces still queued for the disk tier");
        }
    }
}

/// What becomes of a block that skipped the disk, when its retry comes.
pub(super) enum Retry {
    /// These pieces go to the disk now.
    Write(Pieces),
    /// Nothing to write: the disk or its queue holds the block, or it was purged.
    Needless,
    /// Its bytes were not kept and memory no longer holds them.
    Lost,
}

/// A batch handed to foyer: its bytes from the queue (their room is given back once it is
/// written) and from retries, and the task that waits for it.
struct Write {
    bytes: usize,
    retried: usize,
    done: Option<tokio::task::JoinHandle<()>>,
}

fn pieces_bytes(pieces: &Pieces) -> usize {
    pieces.iter().map(|(_, piece)| piece.len()).sum()
}

/// The room `pieces` take, in bytes (a block is at most 64 MiB, far below `u32::MAX`).
fn room_bytes(pieces: &Pieces) -> u32 {
    u32::try_from(pieces_bytes(pieces)).unwrap_or(u32::MAX)
}

fn gauge(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
