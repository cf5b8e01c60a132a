//! The hybrid block cache: fixed-size object blocks and object metadata in a foyer
//! `HybridCache` (memory tier + a disk tier in `cache.dir`).
//!
//! Invariants:
//! - Concurrent misses for one block run one fetch; every waiter gets its bytes or its error.
//! - Whole blocks live in memory only; the disk tier holds them as pieces of
//!   [`PIECE_BYTES`] (at most a block), so a disk hit reads only the pieces its range
//!   overlaps. The disk engine's block size is derived from `cache.block_size`, so every
//!   piece fits it (foyer silently skips entries larger than its block).
//! - A fetched block's pieces are written to disk through a bounded write queue paced to
//!   foyer's writer (`writer.rs`): when the disk falls behind, fills wait for it instead of
//!   dropping pieces or piling them up in memory.
//! - Disk I/O errors that persist turn the disk tier off for good: after
//!   [`DISK_FAILURES_BEFORE_DEGRADED`] failed disk reads in a row, or as many failed
//!   write-and-read-backs of the probe file in a row (probed every [`DISK_PROBE_INTERVAL`],
//!   and again after 1 s, 2 s, 4 s … once something failed), the cache carries on
//!   memory-only ("degraded") until a restart, and says so once in the log, in
//!   `portico_cache_degraded` and on `/readyz`. One transient error only costs the read
//!   it failed (answered by a fetch).
//!
//! Files: this one serves blocks and metadata, `open.rs` opens the cache and `error.rs`
//! holds its errors; `pieces.rs` stores and reads a block's pieces on disk; `writer.rs`
//! queues pieces for the disk; `doorkeeper.rs` decides which disk reads stay in memory;
//! `device.rs` probes the disk (direct I/O at open, health while open); `disk.rs` lays out
//! the disk tier's files and `layout.rs` sizes its pieces, engine blocks and write
//! buffers; `key.rs`, `codec.rs` and `meta.rs` are the entries and their encoding;
//! `purges.rs` keeps purges across restarts; `tier.rs` says where a block came from;
//! `fetching.rs` notes the blocks lookups are fetching from origin streams.

mod codec;
mod device;
mod disk;
mod doorkeeper;
mod error;
mod fetching;
mod kept;
mod key;
mod layout;
mod memory;
mod meta;
mod open;
mod pieces;
mod purges;
mod tier;
mod writer;

use std::future::Future;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use device::DiskHealth;
pub use device::{DISK_FAILURES_BEFORE_DEGRADED, DISK_PROBE_INTERVAL};
pub use disk::{DiskFilesError, DiskFormat, raise_open_file_limit};
use doorkeeper::Doorkeeper;
pub use error::{CacheError, LookupError};
pub use fetching::Fetch;
use foyer::{HybridCache, HybridCacheProperties, Location, Source};
pub use key::{BlockKey, CacheKey, CacheValue};
pub use layout::{DISK_FLUSHERS, DiskLayout, PIECE_BYTES};
pub use meta::{MetaClock, MetaRecord, MetaState};
pub use tier::{Part, Tier};
use writer::WriteQueue;

use crate::buffers::BlockBuffers;
use crate::telemetry::Metrics;
use crate::types::ObjectRef;

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Where a fetched block is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// In memory, and its pieces on disk: a block this node owns.
    Everywhere,
    /// In memory only: a block another cluster member owns (and keeps on its disk).
    Memory,
}

/// The block and metadata cache. Cheap to clone.
#[derive(Clone)]
pub struct BlockCache {
    hybrid: HybridCache<CacheKey, CacheValue>,
    health: Arc<DiskHealth>,
    disk_capacity_bytes: u64,
    purges: Arc<purges::Purges>,
    /// The disk tier's unit (see `layout::PIECE_BYTES`).
    piece_bytes: usize,
    doorkeeper: Arc<Doorkeeper>,
    /// Pieces on their way to the disk tier.
    writes: Arc<WriteQueue>,
    /// The buffers whole blocks are gathered in, reused (`kept.rs`).
    buffers: BlockBuffers,
    /// Set by [`Self::close`]: a pretouch under way ends.
    closed: kept::Closed,
    /// The blocks lookups are fetching now, and which from a stream (`fetching.rs`).
    fetching: Arc<fetching::Fetching>,
    metrics: Arc<Metrics>,
}

/// How full the tiers are. The disk tier is a ring that fills up to its capacity and then
/// reclaims its oldest regions, so its traffic is reported rather than a fill level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheUsage {
    pub memory_capacity_bytes: u64,
    pub memory_used_bytes: u64,
    /// Free block buffers kept for the next fills (`crate::buffers`).
    pub memory_kept_buffer_bytes: u64,
    /// 0 for a memory-only cache.
    pub disk_capacity_bytes: u64,
    pub disk_written_bytes: u64,
    pub disk_read_bytes: u64,
}

impl BlockCache {
    /// Whether the cache was opened with a disk tier (even if it has since failed).
    pub fn has_disk_tier(&self) -> bool {
        self.hybrid.is_hybrid()
    }

    /// Why the disk tier was turned off, once it has been.
    pub fn degraded(&self) -> Option<String> {
        self.health.reason()
    }

    fn disk_in_use(&self) -> bool {
        self.hybrid.is_hybrid() && !self.health.is_degraded()
    }

    /// `key` under its object's purge generation.
    fn generational(&self, key: &BlockKey) -> BlockKey {
        let mut key = key.clone();
        key.generation = self.purges.generation(key.object());
        key
    }

    /// The cache key of piece `index` of `block` (a generational key).
    fn piece_key(&self, block: &BlockKey, index: usize) -> CacheKey {
        CacheKey::Piece {
            block: block.clone(),
            // Both are at most a block size, which the configuration bounds far below 4 GiB.
            piece_bytes: u32::try_from(self.piece_bytes).unwrap_or(u32::MAX),
            index: u32::try_from(index).unwrap_or(u32::MAX),
        }
    }

    /// The cache key of an object's metadata, under its purge generation.
    fn meta_key(&self, object: &ObjectRef) -> CacheKey {
        CacheKey::Meta(object.clone(), self.purges.generation(object))
    }

    /// Makes everything cached of `object` (every version, both tiers) unreachable for
    /// good: its purge generation is raised and journaled before this returns.
    pub fn purge(&self, object: &ObjectRef) -> Result<(), CacheError> {
        // Only the journal's write can fail, so there is a path.
        let journal = self.purges.path().unwrap_or(Path::new(""));
        self.purges
            .purge(object)
            .map(drop)
            .map_err(|source| CacheError::Files(DiskFilesError::dir(journal, source)))
    }

    /// The metadata record if the memory tier holds it; no disk I/O.
    pub fn meta_in_memory(&self, object: &ObjectRef) -> Option<MetaRecord> {
        let entry = self.hybrid.memory().get(&self.meta_key(object))?;
        match entry.value() {
            CacheValue::Meta(record) => Some(record.clone()),
            CacheValue::Block(_) => None,
        }
    }

    /// Bytes `within` of a block of `block_len` bytes, from memory, disk, or `fetch` — run
    /// once however many callers miss at once — as consecutive slices: one of a whole
    /// block, or one per piece read.
    ///
    /// A block in memory is sliced. Otherwise the pieces `within` overlaps are read, each
    /// from memory or disk (foyer verifies each piece's checksum), when every one of them
    /// is cached; a piece read from disk for the second time is kept in memory. Otherwise
    /// the whole block is fetched, kept in memory and queued for the disk in pieces.
    ///
    /// With [`Keep::Memory`] (a block another cluster member owns) nothing of the block is
    /// written to disk, neither when it is fetched nor when memory serves it.
    ///
    /// `fetch` runs in a spawned task: a caller that goes away does not cancel it for the
    /// others, and its result is cached.
    pub async fn block<F, Fut, E>(
        &self,
        key: &BlockKey,
        block_len: usize,
        within: Range<usize>,
        keep: Keep,
        fetch: F,
    ) -> Result<Part, LookupError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, E>> + Send + 'static,
        E: std::error::Error + Clone + Send + Sync + 'static,
    {
        inside(block_len, &within).map_err(LookupError::Cache)?;
        let key = self.generational(key);
        // A memory hit must not go through `get_or_fetch`, which counts and coalesces.
        if let Some(part) = self
            .memory_hit(&key, block_len, within.clone(), keep)
            .map_err(LookupError::Cache)?
        {
            return Ok(part);
        }
        match self.pieces(&key, block_len, within.clone()).await {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            // Answered by a fetch; errors that persist turn the disk tier off.
            Err(error) => self.health.failed("read", &error),
        }
        // Until the fetched block is in memory, which `get_or_fetch` returns after.
        let _fetching = self.fetching.hold(&key);
        let fetched_here = Arc::new(AtomicBool::new(false));
        let flag = fetched_here.clone();
        let fetch = fetch();
        let cache = self.clone();
        let stored = key.clone();
        let fetch = move || async move {
            flag.store(true, Ordering::Release);
            let bytes = fetch.await?;
            if bytes.len() == block_len && keep == Keep::Everywhere {
                cache.store_fetched(&stored, &bytes).await;
            }
            Ok::<_, E>(CacheValue::Block(bytes))
        };
        // Whole blocks live in memory only; the disk holds their pieces.
        let entry = self
            .hybrid
            .memory()
            .get_or_fetch(&CacheKey::Block(key), fetch)
            .await
            .map_err(|error| match error.downcast_ref::<E>() {
                Some(fetch_error) => LookupError::Fetch(fetch_error.clone()),
                None => LookupError::Cache(CacheError::Lookup(error)),
            })?;
        if fetched_here.load(Ordering::Acquire) {
            self.fit_buffers();
        }
        let tier = match entry.source() {
            Source::Outer if fetched_here.load(Ordering::Acquire) => Tier::Upstream,
            Source::Outer => Tier::Coalesced,
            _ => Tier::Memory,
        };
        let bytes = block_of(&entry, block_len).map_err(LookupError::Cache)?;
        Ok(Part::whole(bytes.slice(within), tier))
    }

    /// Notes how the fetch of block `key` under way ([`Self::block`]) fetches it from
    /// here: from an origin stream it found bringing the block, or alone after that stream
    /// stopped before the block.
    pub fn note_fetch(&self, key: &BlockKey, how: Fetch) {
        self.fetching.note(&self.generational(key), how);
    }

    /// How a lookup is fetching block `key` now, if one is: from its miss until the block
    /// is in memory, as [`Self::note_fetch`] last noted it ([`Fetch::Alone`] before).
    pub fn fetch_under_way(&self, key: &BlockKey) -> Option<Fetch> {
        self.fetching.under_way(&self.generational(key))
    }

    /// Bytes `within` of a block of `block_len` bytes when the memory tier holds it, as
    /// [`Self::block`] finds them there; `None` otherwise. Nothing is read from disk and
    /// nothing waits.
    pub fn memory_part(
        &self,
        key: &BlockKey,
        block_len: usize,
        within: Range<usize>,
        keep: Keep,
    ) -> Result<Option<Part>, CacheError> {
        inside(block_len, &within)?;
        self.memory_hit(&self.generational(key), block_len, within, keep)
    }

    /// [`Self::memory_part`] of a generational `key`.
    fn memory_hit(
        &self,
        key: &BlockKey,
        block_len: usize,
        within: Range<usize>,
        keep: Keep,
    ) -> Result<Option<Part>, CacheError> {
        let Some(entry) = self.hybrid.memory().get(&CacheKey::Block(key.clone())) else {
            return Ok(None);
        };
        let bytes = block_of(&entry, block_len)?;
        if keep == Keep::Everywhere {
            self.readmit(key, &bytes, within.start / self.piece_bytes);
        }
        Ok(Some(Part::whole(bytes.slice(within), Tier::Memory)))
    }

    /// Block `key` of `block_len` bytes when the memory tier holds it, not counted as a
    /// lookup (a fetch about to start finds a block put there meanwhile).
    pub fn memory_block(&self, key: &BlockKey, block_len: usize) -> Option<Bytes> {
        let key = CacheKey::Block(self.generational(key));
        let entry = self.hybrid.memory().get(&key)?;
        block_of(&entry, block_len).ok()
    }

    /// Caches a whole block: in memory, and its pieces on disk.
    pub fn insert_block(&self, key: BlockKey, bytes: Bytes) {
        let key = self.generational(&key);
        self.store_pieces(&key, &bytes);
        self.hybrid.memory().insert_with_properties(
            CacheKey::Block(key),
            CacheValue::Block(bytes),
            self.placement(Location::InMem),
        );
        self.fit_buffers();
    }

    /// Caches a whole block just fetched (by an origin stream, here or on another member
    /// for this node, its owner): as [`Self::insert_block`], waiting for room on the disk
    /// as a fill does.
    pub async fn insert_fetched(&self, key: BlockKey, bytes: Bytes) {
        let key = self.generational(&key);
        self.store_fetched(&key, &bytes).await;
        self.hybrid.memory().insert_with_properties(
            CacheKey::Block(key),
            CacheValue::Block(bytes),
            self.placement(Location::InMem),
        );
        self.fit_buffers();
    }

    /// Caches a whole block in memory only: a block another cluster member owns (and
    /// keeps on its disk).
    pub fn insert_in_memory(&self, key: BlockKey, bytes: Bytes) {
        let key = self.generational(&key);
        self.hybrid.memory().insert_with_properties(
            CacheKey::Block(key),
            CacheValue::Block(bytes),
            HybridCacheProperties::default().with_location(Location::InMem),
        );
        self.fit_buffers();
    }

    /// Entry properties for `location`, kept in memory while the disk tier is off.
    fn placement(&self, location: Location) -> HybridCacheProperties {
        let location = if self.disk_in_use() {
            location
        } else {
            Location::InMem
        };
        HybridCacheProperties::default().with_location(location)
    }

    /// The metadata record from memory, or from disk (after a restart or eviction).
    pub async fn meta(&self, object: &ObjectRef) -> Result<Option<MetaRecord>, CacheError> {
        let key = self.meta_key(object);
        let entry = match self.hybrid.memory().get(&key) {
            Some(entry) => entry,
            None if !self.disk_in_use() => return Ok(None),
            None => match self.hybrid.get(&key).await {
                Ok(Some(entry)) => entry,
                Ok(None) => return Ok(None),
                Err(error) => {
                    self.health.failed("read", &error);
                    return Err(CacheError::Lookup(error));
                }
            },
        };
        match entry.value() {
            CacheValue::Meta(record) => Ok(Some(record.clone())),
            CacheValue::Block(_) => Err(CacheError::WrongKind("metadata")),
        }
    }

    /// Stores a metadata record; negative records stay in memory only.
    pub fn insert_meta(&self, object: &ObjectRef, record: MetaRecord) {
        let location = match record.state {
            MetaState::Found(_) => Location::Default,
            MetaState::Missing(_) => Location::InMem,
        };
        self.hybrid.insert_with_properties(
            self.meta_key(object),
            CacheValue::Meta(record),
            self.placement(location),
        );
    }

    /// Removes a block and its pieces from both tiers; whether the cache held any of it.
    pub fn remove_block(&self, key: &BlockKey) -> bool {
        let key = self.generational(key);
        let pieces = key.block_size_bytes.div_ceil(self.piece_bytes as u64);
        let pieces = (0..to_usize(pieces)).map(|index| self.piece_key(&key, index));
        self.writes.remove(&key);
        let mut held = false;
        for key in std::iter::once(CacheKey::Block(key.clone())).chain(pieces) {
            held |= self.hybrid.contains(&key) || self.hybrid.storage().may_contains(&key);
            self.hybrid.remove(&key);
        }
        held
    }

    pub fn remove_meta(&self, object: &ObjectRef) {
        self.hybrid.remove(&self.meta_key(object));
    }

    pub fn usage(&self) -> CacheUsage {
        let memory = self.hybrid.memory();
        let disk = self.hybrid.statistics();
        CacheUsage {
            memory_capacity_bytes: memory.capacity() as u64,
            memory_used_bytes: memory.usage() as u64,
            memory_kept_buffer_bytes: self.buffers.kept_bytes(),
            disk_capacity_bytes: self.disk_capacity_bytes,
            disk_written_bytes: disk.disk_write_bytes() as u64,
            disk_read_bytes: disk.disk_read_bytes() as u64,
        }
    }

    /// Waits for queued disk writes and closes the disk tier.
    pub async fn close(&self) -> Result<(), CacheError> {
        self.closed.store(true, Ordering::Relaxed);
        self.writes.close().await;
        self.health.stop_probe();
        self.hybrid.close().await.map_err(CacheError::Lookup)
    }
}

/// The bytes of a whole-block entry, which must be `block_len` long.
fn block_of(
    entry: &foyer::HybridCacheEntry<CacheKey, CacheValue>,
    block_len: usize,
) -> Result<Bytes, CacheError> {
    match entry.value() {
        CacheValue::Block(bytes) if bytes.len() == block_len => Ok(bytes.clone()),
        CacheValue::Block(bytes) => Err(CacheError::BlockLength {
            expected: block_len,
            got: bytes.len(),
        }),
        CacheValue::Meta(_) => Err(CacheError::WrongKind("block")),
    }
}

/// Whether `within` is a non-empty range inside a block of `block_len` bytes.
fn inside(block_len: usize, within: &Range<usize>) -> Result<(), CacheError> {
    if within.start >= within.end || within.end > block_len {
        return Err(CacheError::OutsideBlock {
            start: within.start,
            end: within.end,
            block_len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
