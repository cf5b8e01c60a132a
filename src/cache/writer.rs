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
//!   `portico_cache_disk_skipped_blocks_total`; it is queued again the next time memory
//!   serves it (readmission). Blocks queued again from memory hits never wait.
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

/// A block's pieces waiting for the disk.
type Pieces = Vec<(CacheKey, Bytes)>;

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
                self.metrics.disk_skipped_blocks.inc();
                Pushed::Full
            }
        }
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
        self.metrics.disk_skipped_blocks.inc();
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
        self.release(&mut pending, bytes);
    }

    fn release(&self, pending: &mut Pending, bytes: usize) {
        *self.lock_progress() = Instant::now();
        pending.bytes = pending.bytes.saturating_sub(bytes);
        self.metrics.disk_queue_bytes.set(gauge(pending.bytes));
        self.room.add_permits(bytes);
        if pending.bytes == 0 {
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

    /// Hands queued pieces to `hybrid`'s disk tier, batch by batch, while `writing()`
    /// says the disk tier is on. Runs for as long as the cache is open.
    pub(super) async fn run(
        self: Arc<Self>,
        hybrid: HybridCache<CacheKey, CacheValue>,
        writing: impl Fn() -> bool,
    ) {
        let mut outstanding: VecDeque<(usize, tokio::task::JoinHandle<()>)> = VecDeque::new();
        loop {
            let queued = self.queued.notified();
            let (batch, bytes) = self.take_batch();
            if batch.is_empty() {
                // Nothing new: let the writes in flight finish, then sleep.
                while let Some((bytes, write)) = outstanding.pop_front() {
                    let _ = write.await;
                    self.release(&mut self.lock(), bytes);
                }
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                queued.await;
                continue;
            }
            if !writing() {
                drop(batch);
                self.release(&mut self.lock(), bytes);
                self.clear();
                continue;
            }
            for (key, piece) in batch {
                hybrid.insert_with_properties(
                    key,
                    CacheValue::Block(piece),
                    HybridCacheProperties::default().with_location(Location::OnDisk),
                );
            }
            let storage = hybrid.clone();
            outstanding.push_back((
                bytes,
                tokio::spawn(async move { storage.storage().wait().await }),
            ));
            while outstanding.len() >= 2 {
                if let Some((bytes, write)) = outstanding.pop_front() {
                    let _ = write.await;
                    self.release(&mut self.lock(), bytes);
                }
            }
        }
    }

    /// Waits for what is queued (see [`Self::drained`]), then ends the writer.
    pub(super) async fn close(&self) {
        self.drained().await;
        self.closed.store(true, Ordering::Release);
        self.queued.notify_one();
    }

    /// Waits (up to [`CLOSE_WAIT`]) until everything queued has been written.
    pub(super) async fn drained(&self) {
        let wait = async {
            loop {
                let empty = self.empty.notified();
                if self.lock().bytes == 0 {
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
